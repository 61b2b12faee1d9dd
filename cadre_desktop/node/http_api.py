"""The node's HTTP API on aiohttp: parse requests, call :class:`Node`, render answers.

Every error body is ``{"error": {"code", "message"}}``; the routing errors aiohttp
raises itself (404, 405, 413) are rendered the same way by one middleware. Request
bodies are JSON objects of at most 4 KiB.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from cadre_desktop.text import clean as clean_text
from cadre_desktop.node import donated, invitations
from cadre_desktop.node.claim_page import content_security_policy, render_claim_page
from cadre_desktop.errors import ApiError, StorageError, wire_code
from cadre_desktop.node.errors import RequestRefused
from cadre_desktop.node.http_status import answer_to
from cadre_desktop.node.identity import b64url_decode
from cadre_desktop.node.node import Node

log = logging.getLogger("cadre.node.http")

MAX_BODY = 4096
#: How long a request body may take to arrive (CADRE_BODY_TIMEOUT_MS). A few KiB
#: come in milliseconds; a client that stalls (or a body aiohttp's decoder waits
#: on forever, like some that claim `Content-Encoding: deflate` and are not) must
#: not hold a request open.
BODY_TIMEOUT_S = 10.0
_BODY_TIMEOUT: Any = web.AppKey("body_timeout_s", float) if hasattr(web, "AppKey") else "body_timeout_s"
MAX_CADRE_CHARS = 64
NO_STORE = {"Cache-Control": "no-store"}
_HTTP_CODES = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    408: "body-timeout",
    413: "body-too-large",
}


def build_app(node: Node, *, body_timeout_s: float = BODY_TIMEOUT_S, first: list | None = None) -> web.Application:
    """The API; `first` are middlewares that run before everything (the connection guard)."""
    api = _Api(node)
    app = web.Application(client_max_size=MAX_BODY, middlewares=[*(first or []), errors_as_json])
    app[_BODY_TIMEOUT] = body_timeout_s
    app.router.add_get("/status", api.status)
    app.router.add_get("/claim", api.claim_page)
    app.router.add_post("/claim", api.claim)
    app.router.add_post("/invitations", api.mint_invitation)
    app.router.add_get("/invitations", api.list_invitations)
    app.router.add_get("/members", api.members)
    app.router.add_post("/join", api.join)
    app.router.add_post("/seed", api.seed)
    return app


class AccessLog(AbstractAccessLogger):
    """One plain line per request. Never a header: Authorization carries a token."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            '%s "%s %s" %s %.1fms',
            request.remote,
            request.method,
            request.path_qs,
            response.status,
            time * 1000,
        )


class _Api:
    def __init__(self, node: Node) -> None:
        self.node = node

    async def status(self, request: web.Request) -> web.Response:
        return _json(self.node.status())

    async def claim_page(self, request: web.Request) -> web.Response:
        page, nonce = render_claim_page(self.node.config.node_id, request.query.get("node"),
                                        self.node.config.node_name)
        headers = {
            "Content-Security-Policy": content_security_policy(nonce),
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
            **NO_STORE,
        }
        return web.Response(text=page, content_type="text/html", headers=headers)

    async def claim(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        secret = _text_field(body, "secret", 1, 512)
        cadre = _text_field(body, "cadre", 1, MAX_CADRE_CHARS, strip=True)
        return _json(self.node.claim(_client(request), secret, cadre))

    async def mint_invitation(self, request: web.Request) -> web.Response:
        self.node.authorize_owner(_bearer(request), request.remote)
        body = await _read_json(request, optional=True)
        ttl_s = body.get("ttl_s", invitations.DEFAULT_TTL_S)
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int):
            raise ApiError(400, "invalid-field", "ttl_s must be a whole number of seconds")
        if not 1 <= ttl_s <= invitations.MAX_TTL_S:
            raise ApiError(
                400,
                "invalid-field",
                f"ttl_s must be from 1 to {invitations.MAX_TTL_S} seconds",
            )
        return _json(invitations.mint_invitation(self.node, ttl_s), status=201)

    async def list_invitations(self, request: web.Request) -> web.Response:
        self.node.authorize_owner(_bearer(request), request.remote)
        return _json(invitations.list_invitations(self.node))

    async def members(self, request: web.Request) -> web.Response:
        self.node.authorize_owner(_bearer(request), request.remote)
        return _json(invitations.list_members(self.node))

    async def join(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        answer = invitations.admit(
            self.node,
            _client(request),
            invitation_id=_text_field(body, "invitation_id", 1, 128),
            secret=_text_field(body, "secret", 1, 256),
            peer_id=_text_field(body, "peer_id", 1, 128),
            public_key=_bytes_field(body, "public_key", 32),
            signature=_bytes_field(body, "signature", 64),
        )
        return _json(answer)


    async def seed(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        return _json(donated.accept_seed(self.node, _client(request), _bearer(request), body))


@web.middleware
async def errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response = await handler(request)
    except RequestRefused as refusal:
        err = answer_to(refusal)
        return _json(err.body(), status=err.status, headers=err.headers)
    except ApiError as err:
        return _json(err.body(), status=err.status, headers=err.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        err = ApiError(
            exc.status,
            _HTTP_CODES.get(exc.status, "http-error"),
            (exc.reason or "request refused").lower(),
        )
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return _json(err.body(), status=exc.status, headers=headers)
    except StorageError as err:
        log.error("%s %s: %s", request.method, request.path, err)
        return _json(ApiError(500, wire_code(err.code), str(err)).body(), status=500)
    except asyncio.CancelledError:
        raise
    except Exception:  # our bug: logged with its traceback; the client gets 500, the node keeps serving
        log.exception("unexpected error answering %s %s", request.method, request.path)
        body = ApiError(500, "internal", "the node hit an unexpected error").body()
        return _json(body, status=500)
    return response


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers={**NO_STORE, **(headers or {})})


async def _read_json(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    return await read_json_body(
        request, max_body=MAX_BODY, timeout=request.app[_BODY_TIMEOUT], optional=optional
    )


async def read_json_body(
    request: web.Request, *, max_body: int, timeout: float, optional: bool = False
) -> dict[str, Any]:
    """A JSON object of at most ``max_body`` bytes arriving within ``timeout`` s, else an ApiError.

    Also used by the host's lend API, which faces the same kind of clients.
    """
    too_large = ApiError(413, "body-too-large", f"the request body is over {max_body} bytes")
    if request.content_length is not None and request.content_length > max_body:
        raise too_large
    try:
        raw = await asyncio.wait_for(request.read(), timeout)
    except asyncio.TimeoutError:
        raise ApiError(408, "body-timeout", f"the request body did not arrive within {timeout:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    except web.RequestPayloadError:
        # The body itself is broken: a Content-Encoding it is not in, a bad chunk.
        raise ApiError(400, "bad-request", "the request body could not be read") from None
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


def _text_field(
    body: dict[str, Any], name: str, low: int, high: int, *, strip: bool = False
) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise ApiError(400, "invalid-field", f"{name!r} must be a string")
    if strip:
        value = value.strip()
    if not low <= len(value) <= high:
        raise ApiError(400, "invalid-field", f"{name!r} must be {low} to {high} characters")
    if clean_text(value, high) is None:
        raise ApiError(400, "invalid-field", f"{name!r} must be printable text")
    return value


def _bytes_field(body: dict[str, Any], name: str, size: int) -> bytes:
    value = _text_field(body, name, 1, 256)
    try:
        data = b64url_decode(value)
    except ValueError:
        data = b""
    if len(data) != size:
        raise ApiError(400, "invalid-field", f"{name!r} must be {size} bytes in base64url")
    return data


def _bearer(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def _client(request: web.Request) -> str:
    return request.remote or "unknown"
