"""What the control API reads of a request: its JSON body, the node id in its path, a pause.

`ControlServer` (control.py) and the routes it registers beside its own (caps_control,
host_control, lend_control) read requests through these, so no route module takes the
server back. The refusals are the API's own: `refused` gives each status its code.
"""

from __future__ import annotations

import json
from datetime import datetime

from cadre_desktop.errors import ApiError, Invalid, NoSuchThing
from cadre_desktop.host.core.records.records import is_node_id
from cadre_desktop.host.core.supervision.holds import parse_rfc3339
from cadre_desktop.wire.httpmsg import Request

MAX_BODY = 64 * 1024
#: How long a request body may take to arrive.
BODY_TIMEOUT_S = 10.0

CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
}
MESSAGES = {
    404: "There is no such endpoint.",
    405: "That method is not allowed on this endpoint.",
    413: f"The request body is larger than {MAX_BODY // 1024} KiB.",
}

#: A request's JSON body: an object, its values as the client sent them (each route checks its own).
Body = dict[str, object]


def refused(status: int, message: str, code: str | None = None) -> ApiError:
    """A guard's refusal: its status, and the code the API gives that status unless told."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return ApiError(status, code or CODES.get(status, "error"), message, headers=headers)


async def read_body(request: Request, allowed: set[str]) -> Body:
    """The body as a JSON object holding only `allowed` fields (`{}` when empty), else an error."""
    try:
        # Bounded by the server in size (MAX_BODY after decoding) and in time: a trickled
        # body would hold its connection busy, out of reach of the idle limit.
        raw = await request.body()
    except ApiError as exc:
        if exc.status == 413:
            raise refused(413, MESSAGES[413]) from None
        if exc.status == 408:
            raise Invalid(f"The request body did not arrive within {BODY_TIMEOUT_S:g} s.") from None
        # The body itself is broken: a Content-Encoding it is not in, a bad chunk.
        raise Invalid("The request body could not be read.") from None
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: a few KiB of "[[[[..." nest deeper than the parser's stack.
        raise Invalid("The request body is not valid JSON.") from None
    if not isinstance(doc, dict):
        raise Invalid("The request body must be a JSON object.")
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise Invalid(f"Unknown field(s): {', '.join(unknown)}.")
    return doc


def node_id_of(request: Request) -> str:
    """The `{id}` of the path, when it is a node id (else a 404 naming it)."""
    node_id = request.match_info["id"]
    if not is_node_id(node_id):
        raise NoSuchThing(f"No node with id {node_id[:40]!r}.")
    return node_id


async def pause_body(request: Request) -> tuple[int | None, datetime | None]:
    """A pause's body, checked: (for_ms, until) — both None for a pause with no end."""
    body = await read_body(request, {"for_ms", "until"})
    for_ms, until = body.get("for_ms"), body.get("until")
    if for_ms is not None and (not isinstance(for_ms, int) or isinstance(for_ms, bool)):
        raise Invalid("for_ms must be a whole number of milliseconds.")
    when = None
    if until is not None:
        when = parse_rfc3339(until)
        if when is None:
            raise Invalid("until must be an RFC 3339 time with its zone, e.g. 2026-01-01T07:00:00+01:00.")
    return for_ms, when


async def node_pause(request: Request) -> tuple[str, int | None, datetime | None]:
    """`POST /api/nodes/{id}/pause` read once: (node id, for_ms, until), the body checked first."""
    for_ms, until = await pause_body(request)
    return node_id_of(request), for_ms, until
