"""The loopback control API: how the CLI (and scripts) drive a running host.

The server listens on 127.0.0.1 on a port the OS picks and publishes where it
is, with a fresh bearer token, in `control.json` (mode 0600) beside the
records. Whoever can read that file is the user who owns the host; nobody else
gets in. Guards, in order, each answered before the request reaches a handler:

- the Host header must name the loopback address and our port (a DNS-rebinding
  page would send its own name): 403;
- any request a browser made (an Origin header, or Sec-Fetch-Site naming
  another site) is refused: 403. A web page on this machine must never drive
  the API, even if it somehow learnt the token;
- the API takes no query parameters, and a token in the URL is refused even
  when it is right, because URLs end up in logs and shell history: 400;
- `Authorization: Bearer <token>`, compared in constant time: else 401.

Every error, ours or the router's (404, 405) or the body reader's (413), is
answered as `{"error": {"code", "message"}}`; a request that cannot be parsed is
one 400 in plain text and one log line. Nothing here logs a token, a claim URL or
an invitation: there is no access log, bodies are never logged, and an unexpected
exception is logged with the request's secrets taken out of its text.

It serves on the HTTP/1.1 server the node's API runs on (`wire/http1.py`, h11), not
aiohttp: importing aiohttp cost the tray about 17 MB (bench/README.md, issue 26).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from cadre_desktop import __version__
from cadre_desktop.errors import ApiError, Bug, CadreError, NoSuchThing, StorageError
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.host.core.events import LENDING_EVENTS, HostEvent
from cadre_desktop.host.core.ops.validate import clean_invitation, clean_name
from cadre_desktop.host.core.records.jsondoc import read_versioned
from cadre_desktop.host.core.records.records import is_node_id
from cadre_desktop.host.edges import caps_control, fleet_control, host_control, lend_control
from cadre_desktop.host.edges.control_body import BODY_TIMEOUT_S, MAX_BODY, MESSAGES, node_id_of, node_pause, read_body, refused
from cadre_desktop.host.edges.http_status import status_of
from cadre_desktop.host.edges.router import Handler, Router, json_answer
from cadre_desktop.host.edges.served import ServedHost
from cadre_desktop.net.netguard import ConnectionGuard, bind_socket
from cadre_desktop.text import LOG_LINES, log_lines, url_host
from cadre_desktop.wire.http1 import HttpServer
from cadre_desktop.wire.httpmsg import Answer, Request

log = logging.getLogger(__name__)

CONTROL_VERSION = 1
HEARTBEAT_S = 15.0
#: Events a slow SSE client may have queued before it is cut off.
STREAM_BACKLOG = 1000
#: Connections the API holds at most (every client is local, so one source is all of
#: them); idle or half-sent ones are closed after IDLE_S. See cadre_desktop/net/netguard.py.
#: Under a flood each newcomer takes the oldest idle one's place, so this is how long a
#: client may take between its connect and its request: measured with a 5,000-connection
#: flood, 64 gave it ~5 ms (1 in 10 clients sending at once was closed unanswered), 256
#: gives it ~20 ms (10 in 10 served at once or after 5 ms, 8 in 10 after 20 ms).
MAX_CONNECTIONS = 256
IDLE_S = 5.0
#: How long requests in flight have to finish when the API stops.
SHUTDOWN_GRACE_S = 2.0

_LOOPBACK = ("127.0.0.1", "::1")
_TOKENISH = {"token", "access_token", "auth", "authorization", "bearer", "key", "api_key"}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Answer:
    return json_answer({"error": {"code": code, "message": message}}, status, headers)


def check_control_file(path: Path) -> None:
    """Refuse a control.json this host cannot have written; leave it as it is.

    A stale file (a host killed without cleaning up) is normal and is simply
    replaced at start. One that is empty, not JSON, of a newer version or of the
    wrong shape was not written by us: like every file the host keeps, it is
    an error naming the file and the problem, never silently overwritten. Call
    it before the host changes anything (right after loading the records).
    """
    doc, _ = read_versioned(path, what="control", current=CONTROL_VERSION, upgrades={})
    if doc is None:
        return
    for key, kind in (("url", str), ("token", str), ("pid", int)):
        value = doc.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise StorageError(
                f"the control file {path} has no valid {key!r}; it was left as it is. "
                "Delete it if no cadre-desktop host is running."
            )


def check_name(value: object) -> str | None:
    return clean_name(value, None)


def check_invitation(value: object) -> str:
    return clean_invitation(value)


_UNEXPECTED = "The host failed unexpectedly; its log has the details."


def _failure(request: Request, exc: BaseException) -> str:
    """An unexpected failure for the log: its words, with the request's secrets taken out, and where it was."""
    frames = "".join(traceback.format_tb(exc.__traceback__))
    return _redact(f"{type(exc).__name__}: {exc}", request.secrets) + "\n" + frames


def _redact(text: str, secrets_: list[str]) -> str:
    for secret in secrets_:
        if secret:
            text = text.replace(secret, "<redacted>")
    return text


class ControlServer:
    def __init__(self, host: ServedHost, control_file: Path, *, bind: str = "127.0.0.1",
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        if bind not in _LOOPBACK:
            raise ValueError(f"the control API listens on loopback only, not {bind!r}")
        self.host = host
        self.control_file = Path(control_file)
        self.bind = bind
        self.heartbeat_s = heartbeat_s
        self.token = ""
        self.port = 0
        self._http: HttpServer | None = None
        self._streams: set[asyncio.Queue[HostEvent | None]] = set()
        self._unsubscribe: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.guard = ConnectionGuard(per_source=MAX_CONNECTIONS, total=MAX_CONNECTIONS, idle_s=IDLE_S,
                                     name="control API")
        self.router = Router([
            ("GET", "/api/host", self._get_host),
            ("GET", "/api/nodes", self._list_nodes),
            ("POST", "/api/nodes", self._add_node),
            ("POST", "/api/nodes/join", self._join_node),
            ("GET", "/api/nodes/{id}", self._get_node),
            ("DELETE", "/api/nodes/{id}", self._remove_node),
            ("POST", "/api/nodes/{id}/retry", self._action("retry_node")),
            ("POST", "/api/nodes/{id}/pause", self._pause_node),
            ("POST", "/api/nodes/{id}/resume", self._action("resume_node")),
            ("POST", "/api/nodes/{id}/restart", self._action("restart_node")),
            ("POST", "/api/nodes/{id}/regenerate", self._action("regenerate_node")),
            ("POST", "/api/nodes/{id}/invite", self._invite_node),
            ("GET", "/api/events", self._events),
            ("GET", "/api/nodes/{id}/history", self._node_history),
            ("GET", "/api/nodes/{id}/logs", self._node_logs),
            *lend_control.routes(host),  # lending's routes live beside these
            *caps_control.routes(host),  # PATCH /api/nodes/{id}: a node's caps
            *host_control.routes(host),  # /api/host/pause, resume, conditions
            *fleet_control.routes(host),  # /api/fleet...: the computers of this one's fleet
        ])

    @property
    def url(self) -> str:
        return f"http://{url_host(self.bind)}:{self.port}"

    # -- life cycle ------------------------------------------------------------

    async def start(self) -> None:
        """Listen on a free loopback port, then publish url, token and pid in control.json."""
        self._loop = asyncio.get_running_loop()
        self.token = secrets.token_urlsafe(32)
        sock = bind_socket(self.bind, 0, reuse=False)
        self.port = sock.getsockname()[1]
        # No access log: request lines are not worth the risk of a secret in them.
        http = HttpServer(self._answer, self.guard, max_body=MAX_BODY, body_timeout_s=BODY_TIMEOUT_S,
                          log=log, label="control API: ")
        await http.start_on([sock], fair=False)  # every client is 127.0.0.1: none is shed; closed if it fails
        self._http = http
        self._unsubscribe = self.host.subscribe(self._on_event)
        write_json_atomic(self.control_file, {
            "version": CONTROL_VERSION, "url": self.url, "token": self.token, "pid": os.getpid(),
        })
        log.info("control API listening on %s", self.url)

    async def stop(self) -> None:
        """End every event stream, stop listening, and take control.json away if it is still ours."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for queue in list(self._streams):
            self._offer(queue, None)
        http, self._http = self._http, None
        if http is not None:
            await http.stop(SHUTDOWN_GRACE_S)
        self._remove_control_file()

    def _remove_control_file(self) -> None:
        try:
            doc = json.loads(read_bytes(self.control_file, max_bytes=64 * 1024, follow_symlinks=False))
        except (OSError, ValueError):
            return
        # Another host may have taken over the home since; its file is not ours to delete.
        theirs = doc.get("token") if isinstance(doc, dict) else None
        if (isinstance(theirs, str) and hmac.compare_digest(theirs.encode(), self.token.encode())
                and doc.get("pid") == os.getpid()):
            try:
                self.control_file.unlink()
            except OSError as exc:
                log.warning("could not remove %s: %s", self.control_file, exc.strerror or exc)

    # -- every request: the guards, the route, the errors ---------------------------

    async def _answer(self, request: Request) -> Answer:
        return await self._errors(request, self._routed)

    async def _routed(self, request: Request) -> Answer:
        await self._guard(request)
        handler, allowed = self.router.resolve(request)
        if handler is None:
            status = 405 if allowed else 404
            raise refused(status, MESSAGES[status])
        remote = await fleet_control.forwarded(self.host, request)  # a node another computer of the fleet hosts
        return remote if remote is not None else await handler(request)

    async def _errors(self, request: Request, handler: Handler) -> Answer:
        try:
            return await handler(request)
        except ApiError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.headers or None)
        except CadreError as exc:
            if isinstance(exc, Bug):  # a rule of ours broken: told as any unexpected failure below
                log.error("control API: %s %s failed: %s", request.method, request.path, _failure(request, exc))
                return error_response(500, "internal_error", _UNEXPECTED)
            return error_response(status_of(exc), exc.code, exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Our bug in a handler: logged (secrets taken out), answered 500, the API keeps serving.
            log.error("control API: %s %s failed: %s", request.method, request.path, _failure(request, exc))
            return error_response(500, "internal_error", _UNEXPECTED)

    async def _guard(self, request: Request) -> None:
        allowed_hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"}
        headers = request.headers
        if headers.get("host", "").lower() not in allowed_hosts:
            raise refused(403, "The Host header must name the loopback address and this port.")
        site = headers.get("sec-fetch-site", "none").lower()
        if "origin" in headers or site != "none":
            raise refused(403, "Requests from web pages are refused.", "origin_refused")
        if request.query_string and not fleet_control.takes_query(request):
            if _TOKENISH & {key.lower() for key in request.query}:
                raise refused(400, "Send the token in the Authorization header, never in the URL.",
                               "token_in_url")
            raise refused(400, "This API takes no query parameters.")
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode("utf-8", "replace"), self.token.encode()):
            raise refused(401, "A valid token is required: 'Authorization: Bearer <token from control.json>'.")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY:
            await read_body(request, set())  # refused by the server's reader (413), which closes the connection

    # -- helpers -----------------------------------------------------------------

    # -- routes ------------------------------------------------------------------

    async def _get_host(self, request: Request) -> Answer:
        return json_answer(
            {"pid": os.getpid(), "version": __version__, "home": str(self.host.paths.data_dir),
             "pause": self.host.pause_state()}
        )

    async def _list_nodes(self, request: Request) -> Answer:
        if request.query_string:  # ?scope=fleet, the one the guard lets through
            return await fleet_control.fleet_nodes(self.host)
        await self.host.settled()  # what a view shows is on disk, or its save error shown
        return json_answer({"nodes": [view.to_json() for view in self.host.list_nodes()]})

    async def _get_node(self, request: Request) -> Answer:
        await self.host.settled()
        return json_answer(self.host.get_node(node_id_of(request)).to_json())

    async def _add_node(self, request: Request) -> Answer:
        body = await read_body(request, {"name"})
        view = await self.host.add_node(check_name(body.get("name")))
        return json_answer(view.to_json(), status=201)

    async def _join_node(self, request: Request) -> Answer:
        body = await read_body(request, {"invitation", "name"})
        given = body.get("invitation")
        if isinstance(given, str):
            request.secrets = [given, given.strip()]
        invitation = check_invitation(given)
        view = await self.host.join_node(invitation, check_name(body.get("name")))
        return json_answer(view.to_json(), status=201)

    async def _invite_node(self, request: Request) -> Answer:
        body = await read_body(request, {"name"})
        view = await self.host.invite_node(node_id_of(request), check_name(body.get("name")))
        return json_answer(view.to_json(), status=201)

    async def _pause_node(self, request: Request) -> Answer:
        """`{}` pauses with no end; `{"for_ms": N}` or `{"until": "<RFC 3339>"}` puts the node to sleep."""
        node_id, for_ms, until = await node_pause(request)
        view = await self.host.pause_node(node_id, for_ms=for_ms, until=until)
        return json_answer(view.to_json())

    def _action(self, method: str) -> Handler:
        async def act(request: Request) -> Answer:
            await read_body(request, set())
            view = await getattr(self.host, method)(node_id_of(request))
            return json_answer(view.to_json())
        return act

    async def _remove_node(self, request: Request) -> Answer:
        node_id = request.match_info["id"]
        existed = is_node_id(node_id) and await self.host.remove_node(node_id)
        # An id no record names may still have an orphaned child running: Remove reclaims it.
        pids = await self.host.reclaim_orphan(node_id) if is_node_id(node_id) and not existed else []
        return json_answer({"removed": node_id, "existed": bool(existed), "orphan_pids": pids})

    # -- events --------------------------------------------------------------------

    def _on_event(self, event: HostEvent) -> None:
        for queue in list(self._streams):
            self._offer(queue, event)

    def _offer(self, queue: asyncio.Queue[HostEvent | None], item: HostEvent | None) -> None:
        """Queue for one stream, from the loop's thread whoever emitted."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is not loop:
            loop.call_soon_threadsafe(self._offer, queue, item)
            return
        try:
            queue.put_nowait(item)
        except asyncio.QueueFull:
            # A client that cannot keep up is cut off rather than growing our memory.
            self._streams.discard(queue)
            queue.get_nowait()
            queue.put_nowait(None)

    def _event_payload(self, event: HostEvent) -> bytes:
        if event.kind in LENDING_EVENTS:
            from cadre_desktop.host.edges import lend_control

            return lend_control.event_bytes(self.host, event)
        try:
            node = self.host.get_node(event.node_id).to_json()
        except NoSuchThing:
            node = None
        except Exception:  # one view that cannot be built must not end every client's event stream
            log.exception("control API: could not read node %s for an event", event.node_id)
            node = None
        data = json.dumps({"id": event.node_id, "node": node, "detail": event.detail})
        return f"event: {event.kind.value}\ndata: {data}\n\n".encode()

    async def _events(self, request: Request) -> Answer:
        headers = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")]
        if request.method == "HEAD":
            return Answer(200, headers, b"")
        queue: asyncio.Queue[HostEvent | None] = asyncio.Queue(maxsize=STREAM_BACKLOG)
        self._streams.add(queue)  # from now on: what happens after the answer's head is not missed
        return Answer(200, headers, b"", stream=self._stream(queue))

    async def _stream(self, queue: asyncio.Queue[HostEvent | None]) -> AsyncIterator[bytes]:
        """The events as the server sends them; ends at the host's stop (a client that left: at a write)."""
        try:
            yield b": connected\n\n"
            while True:
                try:
                    async with asyncio.timeout(self.heartbeat_s):
                        event = await queue.get()
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if event is None:
                    return
                yield self._event_payload(event)
        finally:
            self._streams.discard(queue)

    async def _node_history(self, request: Request) -> Answer:
        """The node's last 24 hours and 7 days (host/core/ops/history.py)."""
        return json_answer(self.host.node_history(node_id_of(request)))

    async def _node_logs(self, request: Request) -> Answer:
        """The node's last lines (`text.LOG_LINES`, bounded and printable); another computer's node is
        answered by that computer (`fleet_control.forwarded`)."""
        node_id = node_id_of(request)
        self.host.get_node(node_id)  # an unknown node is a 404 before any file is read
        lines = await asyncio.to_thread(self.host.log_tail, node_id, LOG_LINES)
        return json_answer({"lines": log_lines(lines)})
