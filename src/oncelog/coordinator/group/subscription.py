"""The topics a consumer-protocol member subscribes to, read from its JoinGroup metadata.

OffsetDelete must refuse to delete a committed offset of a topic an active member still
consumes (GROUP_SUBSCRIBED_TO_TOPIC), so the coordinator needs the subscriptions that it
otherwise carries as opaque bytes. The layout is Kafka's ConsumerProtocolSubscription
(versions 0-3 share the leading int16 version and the array of topic names).
"""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"


class SubscriptionError(ValueError):
    """Member metadata that is not a consumer-protocol subscription."""


def subscribed_topics(metadata: bytes) -> set[str]:
    """The topic names of one ConsumerProtocolSubscription."""
    try:
        (version,) = struct.unpack_from(">h", metadata, 0)
        if version < 0:
            raise SubscriptionError(f"unknown subscription version {version}")
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0 or count > len(metadata):
            raise SubscriptionError(f"bad topic count {count}")
        pos, topics = 6, set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                raise SubscriptionError("truncated topic name")
            topics.add(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise SubscriptionError(str(exc)) from None
