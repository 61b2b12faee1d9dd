"""The lend API: what a borrower's software asks of this host, on `bind_host`:`lend_port`.

It listens only while at least one grant is active, so a host that lends
nothing opens no port. Every call carries `Authorization: Bearer <grant token>`:

    POST   /grants/{id}/donations              a node for the borrower's party   201
    GET    /grants/{id}                        the grant's limits and its nodes  200
    GET    /grants/{id}/donations/{did}        one node                          200
    POST   /grants/{id}/donations/{did}/seed   the seed, presented to the node   200
    DELETE /grants/{id}/donations/{did}        the loan ends                     200

It faces the network, so it has the claim API's hardening: bodies are bounded
in size and in time, fields are checked strictly and named in their error, a
token is compared in constant time (as a digest: see `grants`), and a source
address that sends wrong tokens is locked out for a while. Sources are what
the socket says, never a forwarded header (anyone can write one). Every error
is `{"error": {"code", "message"}}` and no input gets a server error. Nothing
here logs a token: the access log has no headers, and paths hold none.

It is the one server of the host that the LAN reaches, and it runs on the node's
HTTP/1.1 server (`wire/http1.py`, h11; no aiohttp), so every connection passes the
same guard as the node's and the control API's (`cadre_desktop/net/netguard.py`): at most MAX_PER_SOURCE connections from one address
and MAX_CONNECTIONS in all, and a connection that sends nothing, or only part
of its request line and headers, is closed IDLE_S after it connected or last
finished a request. Idle connections from one address cannot take the
host's descriptors from its nodes, its files and its other clients. It
accepts as the node does (`netguard.bind_fair`): on Linux each source address
has its own listen queue, so a flood from one device never keeps another's
connection out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket

from cadre_desktop.errors import ApiError, Bug, CadreError, NoSuchThing, SecretsError, wire_code
from cadre_desktop.host.edges.http_status import status_of
from cadre_desktop.host.edges.lend_wire import errors_as_json, no_route, read_json_body
from cadre_desktop.host.edges.router import Handler, Router, json_answer
from cadre_desktop.host.lending.donations import check_request
from cadre_desktop.host.lending.grants import Grant
from cadre_desktop.host.lending.service import LendingService, LendRefused, LentNodeUnavailable, WrongToken
from cadre_desktop.host.lending.views import LendApiState, LendingViews
from cadre_desktop.net import httpclient
from cadre_desktop.net.netguard import ConnectionGuard, bind_fair
from cadre_desktop.text import url_host
from cadre_desktop.wire.http1 import HttpServer
from cadre_desktop.wire.httpmsg import Answer, Request
from cadre_desktop.wire.ratelimit import FailureLimiter
from cadre_desktop.wire.seed import SeedError, parse_seed

log = logging.getLogger(__name__)

MAX_BODY = 8 * 1024
BODY_TIMEOUT_S = 10.0
SEED_TIMEOUT_S = 5.0
MAX_ANSWER = 16 * 1024
MAX_FAILURES = 5
LOCKOUT_S = 60.0
#: Connections held at most from one address, and in all; an idle or half-sent one is
#: closed IDLE_S after it connected or last finished a request (a header timeout too).
#: MAX_PER_SOURCE is at least twice netguard.ACCEPT_BATCH (see there).
MAX_PER_SOURCE = 32
MAX_CONNECTIONS = 256
IDLE_S = 10.0
#: How long requests in flight have to finish when the API closes.
SHUTDOWN_GRACE_S = 1.0

#: The status of each refusal the lending service gives a borrower, by its code (docs/lending.md).
REFUSAL_STATUSES = {
    "wrong_token": 403,
    "grant_revoked": 410,
    "grant_expired": 410,
    "donation_unknown": 404,
    "grant_full": 409,
    "host_full": 409,
    "donation_ended": 409,
    "not_ready": 409,
    "donation_failed": 409,
    "invalid_seed": 400,
    "seed_mismatch": 400,
    "untrusted_key": 400,
    "bad_signature": 400,
    "already_seeded": 409,
    "node_unavailable": 503,
    "node_refused": 502,
}


def _access(request: Request, target: str, status: int, took_s: float) -> None:
    """One line a request: who, what (the path, never its query or headers: no token), the status."""
    log.info('lend API: %s "%s %s" %s', request.remote, request.method, request.path[:200], status)


class LendServer:
    def __init__(
        self,
        service: LendingService,
        views: LendingViews,
        *,
        bind_host: str,
        port: int,
        max_failures: int = MAX_FAILURES,
        lockout_s: float = LOCKOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
        per_source: int = MAX_PER_SOURCE,
        max_connections: int = MAX_CONNECTIONS,
        idle_s: float = IDLE_S,
    ) -> None:
        self.service = service
        self.views = views
        self.bind_host = bind_host
        self.port = port
        self.body_timeout_s = body_timeout_s
        self.limiter = FailureLimiter(service.clock, max_failures=max_failures, lockout_s=lockout_s)
        self.idle_s = idle_s
        self.guard = ConnectionGuard(per_source=per_source, total=max_connections, idle_s=idle_s,
                                     name="lend API")
        self._http: HttpServer | None = None
        self.router = Router([
            ("POST", "/grants/{grant}/donations", self._request),
            ("GET", "/grants/{grant}", self._grant),
            ("GET", "/grants/{grant}/donations/{donation}", self._donation),
            ("POST", "/grants/{grant}/donations/{donation}/seed", self._seed),
            ("DELETE", "/grants/{grant}/donations/{donation}", self._end),
        ])
        self._sync_lock = asyncio.Lock()
        #: Why the last attempt to listen failed (a port taken), for the owner to read.
        self.error: str | None = None

    def state(self) -> LendApiState:
        """Listening, or why not (the port taken), for every grant view and doctor."""
        listening = self._http is not None
        port = self.bound_port if listening else self.port
        return LendApiState(listening=listening, address=f"{url_host(self.bind_host)}:{port}",
                            error=None if listening else self.error)

    @property
    def bound_port(self) -> int | None:
        """The port it listens on (the setting's, or the one the OS chose for port 0)."""
        addresses = self._http.addresses if self._http is not None else []
        return addresses[0][1] if addresses else None

    async def _answer(self, request: Request) -> Answer:
        return await errors_as_json(request, self._routed)

    async def _routed(self, request: Request) -> Answer:
        handler, allowed = self.router.resolve(request)
        if handler is None:
            raise no_route(allowed)
        return await self._refusals(request, handler)

    # -- listening only while a grant is active ----------------------------------------------

    async def sync(self) -> None:
        """Open the port if a grant is active and it is closed; close it if none is."""
        async with self._sync_lock:
            wanted = bool(self.service.active_grants())
            if wanted and self._http is None:
                await self._start()
            elif not wanted:
                self.error = None  # nothing to reach: no grant is active
                if self._http is not None:
                    await self._stop()
                    log.info("lend API closed: no grant is active")

    async def _start(self) -> None:
        http = HttpServer(self._answer, self.guard, max_body=MAX_BODY, body_timeout_s=self.body_timeout_s,
                          log=log, access=_access, label="lend API: ")
        socks: list[socket.socket] = []
        try:
            socks = bind_fair(self.bind_host, self.port)
            await http.start_on(socks)  # closes them if it cannot listen
        except OSError as exc:
            for sock in socks:
                sock.close()
            self.error = f"the lend API cannot listen on {self.bind_host}:{self.port}: {exc.strerror or exc}"
            log.error("%s (setting 'lend_port'); tried again at the next pass", self.error)
            return
        self._http, self.error = http, None
        log.info("lend API listening on %s:%s", self.bind_host, self.bound_port)

    async def _stop(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.stop(SHUTDOWN_GRACE_S)

    async def close(self) -> None:
        async with self._sync_lock:
            await self._stop()

    # -- guards ------------------------------------------------------------------------------

    async def _refusals(self, request: Request, handler: Handler) -> Answer:
        """Our errors as the node contract writes them; no internal detail for the borrower."""
        try:
            return await handler(request)
        except (LendRefused, LentNodeUnavailable) as err:
            raise ApiError(REFUSAL_STATUSES[err.code], wire_code(err.code), err.message,
                           headers=_retry_after(err.retry_after_s)) from None
        except SecretsError as err:
            log.error("lend API: %s %s: %s", request.method, request.path[:200], err.message)
            raise ApiError(503, "host-unavailable", "the host cannot reach its keyring right now; try again later",
                           headers={"Retry-After": "30"}) from None
        except NoSuchThing as err:
            raise ApiError(404, "not-found", err.message) from None
        except (ApiError, Bug):
            raise  # an answer already, or our bug: errors_as_json logs it and answers 500 "internal"
        except CadreError as err:
            log.error("lend API: %s %s: %s", request.method, request.path[:200], err.message)
            status = status_of(err)
            status = status if 400 <= status < 500 else 503
            raise ApiError(status, wire_code(err.code),
                           err.message if status < 500 else "the host cannot do that right now",
                           headers={"Retry-After": "30"} if status == 503 else None) from None

    def _authorize(self, request: Request) -> Grant:
        client = request.remote or "unknown"
        wait = self.limiter.retry_after(client)
        if wait is not None:
            raise ApiError(429, "too-many-tries", f"too many wrong tokens from this address; try again in {wait} s",
                           headers={"Retry-After": str(wait)})
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        if not token:
            raise ApiError(401, "unauthorized", "send the grant token as 'Authorization: Bearer <token>'",
                           headers={"WWW-Authenticate": "Bearer"})
        try:
            grant = self.service.authorize(request.match_info["grant"], token)
        except WrongToken:
            self.limiter.failed(client)
            raise
        self.limiter.succeeded(client)
        return grant

    async def _body(self, request: Request) -> dict[str, object]:
        return await read_json_body(request)  # bounded by the server: MAX_BODY, body_timeout_s

    # -- routes ------------------------------------------------------------------------------

    async def _request(self, request: Request) -> Answer:
        grant = self._authorize(request)
        wanted = check_request(await self._body(request))
        donation = await self.service.request(grant, wanted)
        return _json(self.views.for_borrower(donation), status=201)

    async def _grant(self, request: Request) -> Answer:
        grant = self._authorize(request)
        await self.service.lifecycle.store.settled()
        return _json(self.views.grant_for_borrower(grant))

    async def _donation(self, request: Request) -> Answer:
        grant = self._authorize(request)
        await self.service.lifecycle.store.settled()  # a start shown is on disk, or its save error
        return _json(self.views.for_borrower(self.service.donation_in(grant, request.match_info["donation"])))

    async def _seed(self, request: Request) -> Answer:
        grant = self._authorize(request)
        body = await self._body(request)
        unknown = sorted(set(body) - {"seed"})
        if unknown:
            raise ApiError(400, "invalid-field", f"unknown field(s): {', '.join(repr(k[:32]) for k in unknown[:4])}")
        try:
            parse_seed(body.get("seed"))  # the node checks it again, with the keys it trusts
        except SeedError as exc:
            raise ApiError(400, "invalid-seed", str(exc)) from None
        donation = await self.service.seed(grant, request.match_info["donation"], body["seed"])
        return _json(self.views.for_borrower(donation))

    async def _end(self, request: Request) -> Answer:
        grant = self._authorize(request)
        donation = self.service.donation_in(grant, request.match_info["donation"])
        await self.service.end(donation.id, why="the borrower ended it")
        return _json({"id": donation.id, "ended": True})


def _retry_after(seconds: int | None) -> dict[str, str] | None:
    return {"Retry-After": str(seconds)} if seconds is not None else None


def _json(body: object, *, status: int = 200) -> Answer:
    return json_answer(body, status, {"Cache-Control": "no-store"})


class NodeSeedClient:
    """POST /seed to a lent node on this machine, bounded by a timeout (h11, no aiohttp)."""

    def __init__(self, host: str, timeout_s: float = SEED_TIMEOUT_S) -> None:
        self.host = host
        self.timeout_s = timeout_s

    async def __call__(self, port: int, token: str, body: dict[str, object]) -> None:
        status, answer = await self._post(port, token, body)
        if status != 200:
            raise node_refusal(status, answer)

    async def _post(self, port: int, token: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
        """The node's status and JSON object; (0, {}) when it did not answer in time or
        answered something that is not bounded HTTP (a node's answer is small)."""
        headers = [("Authorization", f"Bearer {token}"), ("Content-Type", "application/json")]
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await httpclient.request(self.host, port, "POST", "/seed", headers=headers,
                                                  body=json.dumps(body).encode(), max_body=MAX_ANSWER)
        except (TimeoutError, httpclient.ClientError, OSError):
            return 0, {}
        try:
            doc = json.loads(answer.body)
        except (ValueError, RecursionError):
            doc = {}
        return answer.status, doc if isinstance(doc, dict) else {}


def node_refusal(status: int, body: dict[str, object]) -> LendRefused | LentNodeUnavailable:
    """A lent node's answer to a seed (status 0: no answer), as the borrower should see it."""
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if status in (400, 403, 409) and code in ("invalid-seed", "seed-mismatch", "untrusted-key",
                                               "bad-signature", "already-seeded"):
        text = message if isinstance(message, str) and message.isprintable() else code
        return LendRefused(text[:200], code=code.replace("-", "_"))
    if status == 429:
        return LentNodeUnavailable("the node is busy; try again shortly", code="node_unavailable", retry_after_s=60)
    if status == 0:
        return LentNodeUnavailable("the node did not answer; try again shortly", code="node_unavailable",
                                   retry_after_s=5)
    log.error("a lent node answered the host's seed with %s %s", status, code)
    return LentNodeUnavailable("the node refused the host; its owner should look at its log", code="node_refused")
