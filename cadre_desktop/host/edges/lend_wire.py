"""The lend API's error bodies and body reading: the node API's words, on the host's side.

The lend API speaks to borrowers as a node does (the same error shape and wire
codes, the same body bounds: `node/api.py`, `wire/http_status.py`), so it takes
those from `cadre_desktop.wire`; its server is the node's too (`wire/http1.py`, which
bounds a body in size and time and answers its own refusals in these words).
"""

from __future__ import annotations

import asyncio
import logging

from cadre_desktop.errors import ApiError, StorageError, wire_code
from cadre_desktop.host.edges.router import Handler, json_answer
from cadre_desktop.wire.api import HTTP_CODES, parse_json_body
from cadre_desktop.wire.http_status import answer_to
from cadre_desktop.wire.httpmsg import Answer, Request
from cadre_desktop.wire.refusal import RequestRefused

log = logging.getLogger(__name__)

__all__ = ["errors_as_json", "no_route", "read_json_body"]


async def errors_as_json(request: Request, handler: Handler) -> Answer:
    """Every error as ``{"error": {"code", "message"}}``; a failure of ours is a 500 ``internal``."""
    try:
        return await handler(request)
    except RequestRefused as refusal:
        answer = answer_to(refusal)
        return _json(answer.body(), status=answer.status, headers=answer.headers)
    except ApiError as err:
        return _json(err.body(), status=err.status, headers=err.headers)
    except StorageError as err:
        log.error("%s %s: %s", request.method, request.path, err)
        return _json(ApiError(500, wire_code(err.code), str(err)).body(), status=500)
    except asyncio.CancelledError:
        raise
    except Exception:  # our bug: logged with its traceback; the client gets 500, the API keeps serving
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return _json(ApiError(500, "internal", "the host hit an unexpected error").body(), status=500)


def no_route(allowed: list[str]) -> ApiError:
    """No route for a request: 404, or 405 with the methods its path takes (``Allow``)."""
    if not allowed:
        return ApiError(404, HTTP_CODES.get(404, "http-error"), "not found")
    return ApiError(405, HTTP_CODES.get(405, "http-error"), "method not allowed", headers={"Allow": ",".join(allowed)})


def _json(body: object, *, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return json_answer(body, status, {"Cache-Control": "no-store", **(headers or {})})


async def read_json_body(request: Request, *, optional: bool = False) -> dict[str, object]:
    """A JSON object within the server's bounds (size after decoding, and time), else an ApiError."""
    return parse_json_body(await request.body(), optional=optional)
