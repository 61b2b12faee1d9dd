"""The lend API's error bodies and body reading: the node API's words, on aiohttp.

The lend API speaks to borrowers as a node does (the same error shape and wire
codes, the same body bounds: `node/api.py`, `wire/http_status.py`), so it takes
those from the node's package; only the aiohttp side is here, with the engine's
other aiohttp edges. The node program serves with `node/http1.py` and never
imports aiohttp (it costs a node about 95 ms of start-up and 12 MB).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from cadre_desktop.errors import ApiError, StorageError, wire_code
from cadre_desktop.wire.api import BODY_TIMEOUT_S, HTTP_CODES, MAX_BODY, parse_json_body, too_large, too_slow, unreadable
from cadre_desktop.wire.http_status import answer_to
from cadre_desktop.wire.refusal import RequestRefused

log = logging.getLogger(__name__)

__all__ = ["BODY_TIMEOUT_S", "MAX_BODY", "errors_as_json", "read_json_body"]


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as ``{"error": {"code", "message"}}``, aiohttp's own (404, 405, 413) too."""
    try:
        response = await handler(request)
    except RequestRefused as refusal:
        answer = answer_to(refusal)
        return _json(answer.body(), status=answer.status, headers=answer.headers)
    except ApiError as err:
        return _json(err.body(), status=err.status, headers=err.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        made = ApiError(exc.status, HTTP_CODES.get(exc.status, "http-error"), (exc.reason or "request refused").lower())
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return _json(made.body(), status=exc.status, headers=headers)
    except StorageError as err:
        log.error("%s %s: %s", request.method, request.path, err)
        return _json(ApiError(500, wire_code(err.code), str(err)).body(), status=500)
    except asyncio.CancelledError:
        raise
    except Exception:  # our bug: logged with its traceback; the client gets 500, the API keeps serving
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return _json(ApiError(500, "internal", "the host hit an unexpected error").body(), status=500)
    return response


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers={"Cache-Control": "no-store", **(headers or {})})


async def read_json_body(
    request: web.Request, *, max_body: int, timeout: float, optional: bool = False
) -> dict[str, Any]:
    """A JSON object of at most ``max_body`` bytes arriving within ``timeout`` s, else an ApiError."""
    return parse_json_body(await _read_raw(request, max_body, timeout), optional=optional)


async def _read_raw(request: web.Request, max_body: int, timeout: float) -> bytes:
    if request.content_length is not None and request.content_length > max_body:
        raise too_large(max_body)
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        raise too_slow(timeout) from None
    except web.HTTPRequestEntityTooLarge:
        raise too_large(max_body) from None
    except web.RequestPayloadError:
        # The body itself is broken: a Content-Encoding it is not in, a bad chunk.
        raise unreadable() from None
