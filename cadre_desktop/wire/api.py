"""What every API that speaks the node's wire format bounds and answers alike.

The node's API and the host's lend API (which speaks to borrowers as a node does)
share these: the largest request body, how long it may take to arrive, the wire code
of each status a server gives on its own, and the one reading of a JSON object body.
Pure Python, no HTTP library: the node serves with h11, the host with aiohttp.
"""

from __future__ import annotations

import json
from typing import Any

from cadre_desktop.errors import ApiError

MAX_BODY = 4096
#: How long a request body may take to arrive (CADRE_BODY_TIMEOUT_MS). A few KiB
#: come in milliseconds; a client that stalls must not hold a request open.
BODY_TIMEOUT_S = 10.0
#: The code of an error body for the statuses a server or router answers by itself.
HTTP_CODES = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    408: "body-timeout",
    413: "body-too-large",
}


def too_large(max_body: int = MAX_BODY) -> ApiError:
    return ApiError(413, "body-too-large", f"the request body is over {max_body} bytes")


def too_slow(timeout: float) -> ApiError:
    return ApiError(408, "body-timeout", f"the request body did not arrive within {timeout:g} s")


def unreadable() -> ApiError:
    return ApiError(400, "bad-request", "the request body could not be read")


def parse_json_body(raw: bytes, *, optional: bool = False) -> dict[str, Any]:
    if not raw.strip() and optional:
        return {}
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: a few KiB of "[[[[..." nest deeper than the parser's stack.
        raise ApiError(400, "invalid-json", "the request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "invalid-json", "the request body must be a JSON object")
    return doc
