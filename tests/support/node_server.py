"""One real reference node process for synchronous tests (hypothesis runs, module fixtures).

Raw HTTP on purpose: `raw_request` sends exactly the method, headers and bytes
it is given, so tests can send what no well-behaved client would.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.headless import REPO
from tests.support.node_process import free_ports
from tests.support.polling import wait_until


class NodeServer:
    def __init__(self, root: Path, node_id: str, **env: str) -> None:
        self.root = root
        self.node_id = node_id
        self.api_port, p2p_port = free_ports(2)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
        self.env.update(
            PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", CADRE_NODE_ID=node_id,
            CADRE_NODE_DIR=str(root / node_id), CADRE_API_HOST="127.0.0.1",
            CADRE_API_PORT=str(self.api_port), CADRE_P2P_PORT=str(p2p_port),
            CADRE_ADVERTISE_HOST="127.0.0.1", **env,
        )
        self.log = root / f"{node_id}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> NodeServer:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop.node"], env=self.env,
                                         stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        wait_until(self._answers, timeout=20, interval=0.05, what=f"node {self.node_id} to answer")
        return self

    def _answers(self) -> bool:
        assert self.proc is not None, "not started"
        if self.proc.poll() is not None:
            raise AssertionError(f"node exited {self.proc.returncode}: {self.log.read_text()}")
        try:
            return self.request("GET", "/status")[0] == 200
        except OSError:
            return False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, method: str, path: str, body: bytes = b"", headers: list[tuple[str, str]] | None = None,
                *, chunked: bool = False, timeout: float = 10) -> tuple[int, bytes, dict]:
        return raw_request(self.api_port, method, path, body, headers or [], chunked=chunked, timeout=timeout)

    def json(self, method: str, path: str, doc=None, token: str | None = None) -> tuple[int, dict]:
        headers = [("Content-Type", "application/json")]
        if token:
            headers.append(("Authorization", f"Bearer {token}"))
        status, data, _ = self.request(method, path, json.dumps(doc).encode() if doc is not None else b"", headers)
        return status, json.loads(data or b"{}")

    def stop(self) -> int:
        assert self.proc is not None, "not started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def raw_request(port: int, method: str, path: str, body: bytes, headers: list[tuple[str, str]], *,
                chunked: bool = False, timeout: float = 10) -> tuple[int, bytes, dict]:
    """Send exactly this request; Content-Length is added only if no such header is given."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        names = {k.lower() for k, _ in headers}
        for key, value in headers:
            conn.putheader(key, value)
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        elif "content-length" not in names and (body or method in ("POST", "PUT")):
            conn.putheader("Content-Length", str(len(body)))
        if chunked:  # encoded here, so headers and body leave in one segment, like a real client's
            body = (f"{len(body):X}\r\n".encode() + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
        conn.endheaders(body if body else None)
        started = time.monotonic()
        resp = conn.getresponse()
        data = resp.read()
        assert time.monotonic() - started < timeout
        return resp.status, data, dict(resp.getheaders())
    finally:
        conn.close()


def send_raw(port: int, raw: bytes, timeout: float = 5) -> bytes:
    """Write `raw` as it is, close our side, and read whatever comes back (b"" when nothing)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return reply
