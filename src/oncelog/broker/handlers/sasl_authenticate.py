"""SaslAuthenticate (36) after authentication or without SASL: ILLEGAL_SASL_STATE with
Kafka's message (the exchange itself is oncelog.security.sasl's, before the handlers)."""

from __future__ import annotations

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import SaslAuthenticateAnswer, SaslAuthenticateRequest
from oncelog.errors import ErrorCode


def handle(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateAnswer:
    return {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }
