"""The node's routes (:mod:`api`) on aiohttp, and the JSON error helpers the host's lend API shares.

The node program itself serves with :mod:`http1` and never imports this module
(aiohttp costs a node about 95 ms of start-up and 12 MB). It stays for code that
already runs aiohttp: the host's lend API reads bodies and renders errors with
:func:`read_json_body` and :func:`errors_as_json`, and :func:`build_app` serves the
node's routes in-process, the same answers as the node's own server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from cadre_desktop.node.api import (
    BODY_TIMEOUT_S,
    HTTP_CODES,
    MAX_BODY,
    Api,
    Request,
    parse_json_body,
    too_large,
    too_slow,
    unreadable,
)
from cadre_desktop.node.errors import ApiError, StorageError
from cadre_desktop.node.node import Node

log = logging.getLogger("cadre.node.http")

__all__ = ["BODY_TIMEOUT_S", "MAX_BODY", "build_app", "errors_as_json", "read_json_body"]


def build_app(node: Node, *, body_timeout_s: float = BODY_TIMEOUT_S, first: list | None = None) -> web.Application:
    """The node's API as an aiohttp app; `first` are middlewares that run before it."""
    api = Api(node)

    async def handle(request: web.Request) -> web.Response:
        async def read_body() -> bytes:
            return await _read_raw(request, MAX_BODY, body_timeout_s)

        headers = {name.lower(): value for name, value in reversed(request.headers.items())}
        answer = await api.answer(Request(request.method, request.path, request.query_string, headers,
                                          request.remote, read_body))
        return web.Response(status=answer.status, headers=answer.headers, body=answer.body)

    app = web.Application(client_max_size=MAX_BODY, middlewares=[*(first or [])])
    app.router.add_route("*", "/{path:.*}", handle)
    return app


@web.middleware
async def errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error as ``{"error": {"code", "message"}}``, aiohttp's own (404, 405, 413) too."""
    try:
        response = await handler(request)
    except ApiError as err:
        return _json(err.body(), status=err.status, headers=err.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        err = ApiError(exc.status, HTTP_CODES.get(exc.status, "http-error"), (exc.reason or "request refused").lower())
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return _json(err.body(), status=exc.status, headers=headers)
    except StorageError as err:
        log.error("%s %s: %s", request.method, request.path, err)
        return _json(ApiError(500, err.code, str(err)).body(), status=500)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return _json(ApiError(500, "internal", "the node hit an unexpected error").body(), status=500)
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
        return await asyncio.wait_for(request.read(), timeout)
    except asyncio.TimeoutError:
        raise too_slow(timeout) from None
    except web.HTTPRequestEntityTooLarge:
        raise too_large(max_body) from None
    except web.RequestPayloadError:
        # The body itself is broken: a Content-Encoding it is not in, a bad chunk.
        raise unreadable() from None
