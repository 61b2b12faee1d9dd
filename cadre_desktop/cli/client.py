"""The CLI's client of the control API: synchronous, standard library only, quick to start.

It finds the host through `control.json`. Proxies are never used (the token
must not travel through one, and the host is on this machine) and redirects
are never followed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cadre_desktop.errors import ApiError, MachineError
from cadre_desktop.files.readfile import read_bytes

if TYPE_CHECKING:
    import socket
    import urllib.error
    import urllib.request

READ_TIMEOUT_S = 10.0
#: Adding or restarting a node waits for a spawn; give it time.
ACTION_TIMEOUT_S = 90.0
#: The server sends a heartbeat every 15 s; three missed ones mean it is gone.
STREAM_TIMEOUT_S = 45.0
#: How long one try of a connect to the host waits before a new socket tries (`connect_quickly`).
CONNECT_TRY_S = 0.25
#: How many more times a GET or HEAD is sent when the host closed the connection unanswered.
RESENDS_IDEMPOTENT = 2
#: A connection that ended before any byte of an answer (http.client's RemoteDisconnected is a
#: ConnectionResetError): the request may never have been read.
_CLOSED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class NoHost(MachineError):
    """No host is running for this home (exit code 3). The host's own error answers are
    `ApiError`s (exit code 1), with the status and code it sent."""

    code = "no_host"


@dataclass(frozen=True)
class ControlInfo:
    url: str
    token: str
    pid: int


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if os.name == "nt":
        import psutil  # only here: os.kill(pid, 0) would terminate on Windows

        return psutil.pid_exists(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, someone else's
    return True


def read_control(path: Path) -> ControlInfo:
    """What control.json says, if a live process wrote it; else NoHost."""
    try:
        # Never a FIFO (it would hang the CLI) nor a huge file: control.json is ~200 bytes.
        doc = json.loads(read_bytes(path, max_bytes=64 * 1024, follow_symlinks=False).decode("utf-8"))
        info = ControlInfo(url=str(doc["url"]), token=str(doc["token"]), pid=int(doc["pid"]))
    except FileNotFoundError:
        raise NoHost(f"no host is running for this home ({path} does not exist)") from None
    except OSError as exc:
        raise NoHost(f"{path} is unreadable ({exc.strerror or type(exc).__name__}); is a host running?") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise NoHost(f"{path} is unreadable ({type(exc).__name__}); is a host running?") from None
    if not info.url.startswith("http://127.0.0.1:") and not info.url.startswith("http://[::1]:"):
        raise NoHost(f"{path} names a non-loopback address; refusing to send the token there")
    if not pid_alive(info.pid):
        raise NoHost(f"the host that wrote {path} (pid {info.pid}) is not running any more")
    return info


def connect_quickly(address: tuple[str, int], timeout: float, *,
                    connect: Callable[[tuple[str, int], float], socket.socket] | None = None,
                    clock: Callable[[], float] = time.monotonic) -> socket.socket:
    """A TCP connection to `address` within `timeout`, each try given `CONNECT_TRY_S` before a new
    socket tries again. Under a flood of connections the host's queue of connections not yet
    accepted is full and the kernel drops a new one's SYN; the connect's own resends come 1, 3 and
    7 s later, so on a busy machine one unlucky connect spent the CLI's 10 s (tests/reliability/
    test_flood.py). A fresh try every quarter second takes the queue's next free place."""
    import socket

    dial = connect or socket.create_connection
    deadline = clock() + timeout
    while True:
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError(f"no connection to {address[0]}:{address[1]} within {timeout:g} s")
        try:
            return dial(address, min(CONNECT_TRY_S, left))
        except TimeoutError:
            continue


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    """No proxies, no redirects, connections made by `connect_quickly`. Built on first use:
    ``urllib.request`` brings ``http.client``, ``email`` and ``ssl`` (OpenSSL), which the tray
    app, importing the CLI to start, never uses."""
    import http.client
    import socket
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    class QuickConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            if not isinstance(self.timeout, (int, float)):  # no timeout given: http.client's own
                super().connect()
                return
            self.sock = connect_quickly((self.host, self.port), float(self.timeout))
            self.sock.settimeout(self.timeout)  # the request's, not the try's
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    class QuickHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(QuickConnection, req)

    return urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect(), QuickHandler())


def _api_error(exc: urllib.error.HTTPError) -> ApiError:
    try:
        error = json.loads(exc.read() or b"{}")["error"]
        return ApiError(exc.code, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError, OSError):
        return ApiError(exc.code, "http_error", f"the host answered HTTP {exc.code} {exc.reason}")


def _timed_out(timeout: float) -> ApiError:
    return ApiError(0, "timeout", f"the host did not answer within {timeout:.0f} s")


class ControlClient:
    def __init__(self, info: ControlInfo) -> None:
        self.info = info

    @classmethod
    def from_file(cls, path: Path) -> ControlClient:
        return cls(read_control(path))

    def _open(self, method: str, path: str, body: Any, timeout: float, accept: str = "application/json"):
        """Send one request; a request that changes nothing (GET, HEAD) is sent again, on a
        new connection, when the host closed or reset the connection before any answer
        (RFC 9110 9.2.2): the host's connection guard may end a connection it has not read yet
        to make room under a flood of connections, and on a busy machine the CLI's request can
        arrive after that (its process not run between its connect and its send)."""
        tries = 1 + (RESENDS_IDEMPOTENT if method in ("GET", "HEAD") else 0)
        closed = ""
        for _ in range(tries):
            resp, closed = self._open_once(method, path, body, timeout, accept)
            if resp is not None:
                return resp
        raise ApiError(0, "unreachable", f"the connection to the host failed: {closed}")

    def _open_once(self, method: str, path: str, body: Any, timeout: float, accept: str) -> tuple[Any, str]:
        """(the answer, "") or, for a connection closed unanswered (`_CLOSED`), (None, how)."""
        import urllib.error
        import urllib.request
        from http.client import HTTPException

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.info.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.info.token}")
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            return _opener().open(request, timeout=timeout), ""
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                raise NoHost(f"no host is answering at {self.info.url} (pid {self.info.pid})") from None
            if isinstance(reason, TimeoutError):
                raise _timed_out(timeout) from None
            if isinstance(reason, _CLOSED):
                return None, str(reason)
            raise ApiError(0, "unreachable", f"cannot reach the host at {self.info.url}: {reason}") from None
        except TimeoutError:
            raise _timed_out(timeout) from None
        except _CLOSED as exc:
            return None, str(exc)
        except (ConnectionError, HTTPException) as exc:
            raise ApiError(0, "unreachable", f"the connection to the host failed: {exc}") from None

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = READ_TIMEOUT_S) -> Any:
        try:
            with self._open(method, path, body, timeout) as resp:
                raw = resp.read()
        except TimeoutError:
            raise _timed_out(timeout) from None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(0, "bad_answer", "the host answered with something that is not JSON") from None

    # -- the API, one method per endpoint -------------------------------------------

    def host_info(self) -> dict:
        return self.request("GET", "/api/host")

    def list_nodes(self) -> list[dict]:
        return self.request("GET", "/api/nodes")["nodes"]

    def get_node(self, node_id: str) -> dict:
        return self.request("GET", f"/api/nodes/{_quote(node_id)}")

    def add_node(self, name: str | None) -> dict:
        body = {} if name is None else {"name": name}
        return self.request("POST", "/api/nodes", body, timeout=ACTION_TIMEOUT_S)

    def join_node(self, invitation: str, name: str | None) -> dict:
        body: dict[str, Any] = {"invitation": invitation}
        if name is not None:
            body["name"] = name
        return self.request("POST", "/api/nodes/join", body, timeout=ACTION_TIMEOUT_S)

    def node_action(self, node_id: str, action: str) -> dict:
        return self.request("POST", f"/api/nodes/{_quote(node_id)}/{action}", {}, timeout=ACTION_TIMEOUT_S)

    def pause_node(self, node_id: str, body: dict) -> dict:
        return self.request("POST", f"/api/nodes/{_quote(node_id)}/pause", body, timeout=ACTION_TIMEOUT_S)

    def remove_node(self, node_id: str) -> dict:
        return self.request("DELETE", f"/api/nodes/{_quote(node_id)}", timeout=ACTION_TIMEOUT_S)

    def set_node_caps(self, node_id: str, change: dict[str, Any]) -> dict:
        return self.request("PATCH", f"/api/nodes/{_quote(node_id)}", change, timeout=ACTION_TIMEOUT_S)

    def node_history(self, node_id: str) -> dict:
        return self.request("GET", f"/api/nodes/{_quote(node_id)}/history")

    # -- lending -----------------------------------------------------------------

    def list_grants(self) -> list[dict]:
        return self.request("GET", "/api/grants")["grants"]

    def create_grant(self, label: str | None, max_nodes: int | None, expires_in_s: int | None) -> dict:
        body = {k: v for k, v in (("label", label), ("max_nodes", max_nodes), ("expires_in_s", expires_in_s))
                if v is not None}
        return self.request("POST", "/api/grants", body)

    def get_grant(self, grant_id: str) -> dict:
        return self.request("GET", f"/api/grants/{_quote(grant_id)}")

    def grant_link(self, grant_id: str) -> str:
        return self.request("GET", f"/api/grants/{_quote(grant_id)}/link")["link"]

    def revoke_grant(self, grant_id: str) -> dict:
        return self.request("POST", f"/api/grants/{_quote(grant_id)}/revoke", {}, timeout=ACTION_TIMEOUT_S)

    def list_donations(self) -> list[dict]:
        return self.request("GET", "/api/donations")["donations"]

    def get_donation(self, donation_id: str) -> dict:
        return self.request("GET", f"/api/donations/{_quote(donation_id)}")

    def donation_action(self, donation_id: str, action: str) -> dict:
        return self.request("POST", f"/api/donations/{_quote(donation_id)}/{action}", {}, timeout=ACTION_TIMEOUT_S)

    def retry_donation(self, donation_id: str) -> dict:
        return self.request("POST", f"/api/donations/{_quote(donation_id)}/retry", {}, timeout=ACTION_TIMEOUT_S)

    def end_donation(self, donation_id: str) -> dict:
        return self.request("DELETE", f"/api/donations/{_quote(donation_id)}", timeout=ACTION_TIMEOUT_S)

    def events(self) -> Iterator[tuple[str, dict]]:
        """Connect now; the iterator yields (kind, data) per event until the host closes the stream.

        Once this returns the host is subscribed, so nothing that happens after is missed.
        """
        resp = self._open("GET", "/api/events", None, STREAM_TIMEOUT_S, "text/event-stream")

        def stream() -> Iterator[tuple[str, dict]]:
            with resp:
                yield from parse_sse(resp)
        return stream()


def _quote(row_id: str) -> str:
    return urllib.parse.quote(row_id, safe="")


def parse_sse(lines) -> Iterator[tuple[str, dict]]:
    """Server-sent events from an iterable of byte lines; comments (heartbeats) are skipped."""
    kind, data = "message", cast(list[str], [])
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                try:
                    yield kind, json.loads("\n".join(data))
                except ValueError:
                    pass
            kind, data = "message", cast(list[str], [])
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
