"""ApiVersions (18): the exact table of versions we implement."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import ApiVersionsAnswer, ApiVersionsRequest
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import SUPPORTED_VERSIONS


def api_keys() -> list[dict[str, int]]:
    return [
        {"api_key": int(key), "min_version": lo, "max_version": hi}
        for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    ]


def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsAnswer:
    return {"error_code": ErrorCode.none, "api_keys": api_keys(), "throttle_time": 0}


def unsupported_version_response() -> dict[str, Any]:
    """Sent in the v0 layout when a client asks for a version we do not have."""
    return {
        "error_code": ErrorCode.unsupported_version,
        "api_keys": api_keys(),
        "throttle_time": 0,
    }
