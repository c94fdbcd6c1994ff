"""The two ways a SASL exchange fails, as Kafka tells them apart."""

from __future__ import annotations


class SaslFailed(Exception):
    """A failure whose text must not reach the client (it may tell which users exist): the
    client hears Kafka's generic "invalid credentials" message (Kafka's SaslException)."""


class SaslAuthenticationFailed(SaslFailed):
    """A failure whose message goes to the client as is (Kafka's SaslAuthenticationException)."""
