"""The node's HTTP API without an HTTP library: routes, request checks, JSON answers.

A server hands each request over as a :class:`Request` (method, decoded path,
query, headers, peer address, and a way to read the body under its limits) and
writes back the :class:`Answer` (both in `wire/httpmsg.py`). The node's server is
`wire/http1.py`, the host's too. Every decision stays in
:class:`Node`; this module only parses and renders.

Every error body is ``{"error": {"code", "message"}}``, unknown routes (404) and
methods (405, with ``Allow``) included. Request bodies are JSON objects of at most
4 KiB.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cadre_desktop.errors import ApiError, Invalid, StorageError, wire_code
from cadre_desktop.node.cadre import donated, invitations, run_request
from cadre_desktop.node.cadre.claim_page import content_security_policy, render_claim_page
from cadre_desktop.node.node import Node
from cadre_desktop.text import clean as clean_text
from cadre_desktop.wire.api import HTTP_CODES
from cadre_desktop.wire.http_status import answer_to
from cadre_desktop.wire.httpmsg import Answer, Request
from cadre_desktop.wire.keys import b64url_decode
from cadre_desktop.wire.refusal import RequestRefused

log = logging.getLogger("cadre.node.http")

MAX_CADRE_CHARS = 64
NO_STORE = (("Cache-Control", "no-store"),)
JSON_TYPE = "application/json; charset=utf-8"


def json_answer(doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Answer:
    extra = list((headers or {}).items())
    return Answer(status, [("Content-Type", JSON_TYPE), *NO_STORE, *extra], json.dumps(doc).encode())


def error_answer(err: ApiError) -> Answer:
    return json_answer(err.body(), err.status, err.headers)


def http_error(status: int, reason: str, headers: Mapping[str, str] | None = None) -> Answer:
    """The JSON body for a status the server or the router gives on its own."""
    return json_answer(ApiError(status, HTTP_CODES.get(status, "http-error"), reason).body(), status, headers)


Handler = Callable[[Request], Awaitable[Answer]]
#: The longest wait `GET /status?wait=` holds a request (a longer one is cut to it).
MAX_WAIT_S = 60.0


def _wait_of(value: str | None) -> float | None:
    """A wait in seconds, a number above 0, cut to MAX_WAIT_S; else None."""
    try:
        wait_s = float(value or "")
    except ValueError:
        return None
    return min(wait_s, MAX_WAIT_S) if math.isfinite(wait_s) and wait_s > 0 else None
#: How long after answering `POST /host/run` the node stops (its answer leaves first).
STOP_AFTER_S = 0.1


class Api:
    """The node's routes. ``answer`` never raises: every failure becomes an error body."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._stopping: asyncio.Task[None] | None = None
        self.routes: dict[str, dict[str, Handler]] = {
            "/status": {"GET": self.status},
            "/claim": {"GET": self.claim_page, "POST": self.claim},
            "/invitations": {"POST": self.mint_invitation, "GET": self.list_invitations},
            "/members": {"GET": self.members},
            "/join": {"POST": self.join},
            "/seed": {"POST": self.seed},
            "/host/run": {"POST": self.host_run},
        }

    def allowed(self, path: str) -> list[str]:
        methods = set(self.routes.get(path, ()))
        if "GET" in methods:
            methods.add("HEAD")  # a GET route answers HEAD too, without the body
        return sorted(methods)

    async def answer(self, request: Request) -> Answer:
        methods = self.routes.get(request.path)
        if methods is None:
            return http_error(404, "not found")
        handler = methods.get("GET" if request.method == "HEAD" else request.method)
        if handler is None:
            return http_error(405, "method not allowed", {"Allow": ",".join(self.allowed(request.path))})
        try:
            return await handler(request)
        except RequestRefused as refusal:
            return error_answer(answer_to(refusal))
        except ApiError as err:
            return error_answer(err)
        except StorageError as err:
            log.error("%s %s: %s", request.method, request.path, err)
            return json_answer(ApiError(500, wire_code(err.code), str(err)).body(), 500)
        except Exception:  # our bug: logged with its traceback; the client gets 500, the node keeps serving
            log.exception("unexpected error answering %s %s", request.method, request.path)
            return json_answer(ApiError(500, "internal", "the node hit an unexpected error").body(), 500)

    # -- the routes ------------------------------------------------------------------------

    async def status(self, request: Request) -> Answer:
        """`GET /status`, and with `?wait=S&since=STATE` a long-poll: answered once the state is
        no longer STATE, or after S seconds (at most `MAX_WAIT_S`); a bad or missing query answers at once."""
        since = request.query.get("since") if request.query_string else None
        wait_s = _wait_of(request.query.get("wait")) if since else None
        if since and wait_s is not None:
            await self.node.wait_for_change(since, wait_s)
        return json_answer(self.node.status())

    async def claim_page(self, request: Request) -> Answer:
        page, nonce = render_claim_page(self.node.config.node_id, request.query.get("node"),
                                        self.node.config.node_name)
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Security-Policy", content_security_policy(nonce)),
            ("Referrer-Policy", "no-referrer"),
            ("X-Content-Type-Options", "nosniff"),
            *NO_STORE,
        ]
        return Answer(200, headers, page.encode())

    async def claim(self, request: Request) -> Answer:
        body = await request.json()
        secret = text_field(body, "secret", 1, 512)
        cadre = text_field(body, "cadre", 1, MAX_CADRE_CHARS, strip=True)
        return json_answer(self.node.claim(request.client, secret, cadre))

    async def mint_invitation(self, request: Request) -> Answer:
        self.node.authorize_owner(request.bearer(), request.remote)
        body = await request.json(optional=True)
        ttl_s = body.get("ttl_s", invitations.DEFAULT_TTL_S)
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int):
            raise ApiError(400, "invalid-field", "ttl_s must be a whole number of seconds")
        if not 1 <= ttl_s <= invitations.MAX_TTL_S:
            raise ApiError(400, "invalid-field", f"ttl_s must be from 1 to {invitations.MAX_TTL_S} seconds")
        return json_answer(invitations.mint_invitation(self.node, ttl_s), status=201)

    async def list_invitations(self, request: Request) -> Answer:
        self.node.authorize_owner(request.bearer(), request.remote)
        return json_answer(invitations.list_invitations(self.node))

    async def members(self, request: Request) -> Answer:
        self.node.authorize_owner(request.bearer(), request.remote)
        return json_answer(invitations.list_members(self.node))

    async def join(self, request: Request) -> Answer:
        body = await request.json()
        answer = invitations.admit(
            self.node,
            request.client,
            invitation_id=text_field(body, "invitation_id", 1, 128),
            secret=text_field(body, "secret", 1, 256),
            peer_id=text_field(body, "peer_id", 1, 128),
            public_key=bytes_field(body, "public_key", 32),
            signature=bytes_field(body, "signature", 64),
        )
        return json_answer(answer)

    async def host_run(self, request: Request) -> Answer:
        """The host asks the node to hold itself: write run.json, then exit with code 0 (§7)."""
        self.node.authorize_host(request.bearer(), request.remote)
        try:
            doc = run_request.checked(await request.json())
        except Invalid as exc:
            raise ApiError(400, "invalid-field", exc.message) from None
        run_request.write(self.node.config.node_dir, doc)
        self._stopping = asyncio.get_running_loop().create_task(_stop_after(self.node, STOP_AFTER_S))
        return json_answer({**doc, "stopping": True}, status=202)

    async def seed(self, request: Request) -> Answer:
        body = await request.json()
        return json_answer(donated.accept_seed(self.node, request.client, request.bearer(), body))


async def _stop_after(node: Node, delay_s: float) -> None:
    await asyncio.sleep(delay_s)  # the answer leaves first
    node.stop_soon()


def text_field(body: dict[str, Any], name: str, low: int, high: int, *, strip: bool = False) -> str:
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


def bytes_field(body: dict[str, Any], name: str, size: int) -> bytes:
    value = text_field(body, name, 1, 256)
    try:
        data = b64url_decode(value)
    except ValueError:
        data = b""
    if len(data) != size:
        raise ApiError(400, "invalid-field", f"{name!r} must be {size} bytes in base64url")
    return data
