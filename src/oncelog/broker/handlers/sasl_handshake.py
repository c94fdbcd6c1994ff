"""SaslHandshake (17) once a connection is past authentication, or on a listener without
SASL: ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers it (the exchange itself happens in the
server's network layer, oncelog.security.sasl, before requests reach the handlers)."""

from __future__ import annotations

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import SaslHandshakeAnswer, SaslHandshakeRequest
from oncelog.errors import ErrorCode


def handle(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeAnswer:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
