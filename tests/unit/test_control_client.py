"""The CLI's client against a real loopback server that ends connections without answering.

The host's connection guard may end a connection it has not read yet (a flood of
connections to the control API takes its room; on a busy machine the CLI's request
arrives after that). A request that changes nothing is sent again on a new
connection; one that changes something never is (the host may have acted on it).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cadre_desktop.cli import client as client_module
from cadre_desktop.cli.client import CONNECT_TRY_S, READ_TIMEOUT_S, RESENDS_IDEMPOTENT, ControlClient, ControlInfo, NoHost, connect_quickly
from cadre_desktop.errors import ApiError

ANSWER = json.dumps({"nodes": []}).encode()


def _serve(listener: socket.socket, unanswered: int, seen: list[bytes]) -> None:
    """Close the first `unanswered` connections as soon as their request arrived, then answer."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # the test is over
        with conn:
            conn.settimeout(10)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                request += chunk
            seen.append(request.split(b"\r\n", 1)[0])
            if len(seen) <= unanswered:
                continue  # closed with nothing said: the client reads end-of-file
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))


@contextmanager
def closing_server(unanswered: int) -> Iterator[tuple[ControlClient, list[bytes]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []
    thread = threading.Thread(target=_serve, args=(listener, unanswered, seen), daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        yield ControlClient(ControlInfo(url=f"http://127.0.0.1:{port}", token="t" * 43, pid=1)), seen
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close from here would not)
        listener.close()
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_a_get_the_host_closed_unanswered_is_sent_again_on_a_new_connection():
    with closing_server(unanswered=RESENDS_IDEMPOTENT) as (client, seen):
        assert client.list_nodes() == []
    assert seen == [b"GET /api/nodes HTTP/1.1"] * (RESENDS_IDEMPOTENT + 1)


def test_a_get_closed_unanswered_every_time_says_so_after_its_resends():
    with closing_server(unanswered=RESENDS_IDEMPOTENT + 1) as (client, seen):
        with pytest.raises(ApiError) as raised:
            client.list_nodes()
    assert raised.value.code == "unreachable"
    assert raised.value.message.startswith("the connection to the host failed: ")
    assert len(seen) == RESENDS_IDEMPOTENT + 1


def test_a_post_the_host_closed_unanswered_is_never_sent_again():
    with closing_server(unanswered=1) as (client, seen):
        with pytest.raises(ApiError) as raised:
            client.add_node("one")
    assert raised.value.code == "unreachable"
    assert seen == [b"POST /api/nodes HTTP/1.1"]


class Dialer:
    """A stand-in for socket.create_connection on a fake clock: the first `drops` tries wait out
    their timeout (a SYN the kernel dropped), the next one connects."""

    def __init__(self, drops: int) -> None:
        self.now = 0.0
        self.drops = drops
        self.tries: list[float] = []

    def clock(self) -> float:
        return self.now

    def dial(self, address: tuple[str, int], timeout: float) -> socket.socket:
        self.tries.append(timeout)
        if len(self.tries) <= self.drops:
            self.now += timeout
            raise TimeoutError("timed out")
        return socket.socket()


def test_a_connect_the_host_s_full_queue_dropped_is_tried_afresh_each_quarter_second():
    """Under a flood the kernel drops a SYN while the host's queue is full, and a connect's own
    resends come 1, 3, 7 s later: the CLI's 10 s ran out on a busy machine (tests/reliability)."""
    dialer = Dialer(drops=7)
    with connect_quickly(("127.0.0.1", 9), 10.0, connect=dialer.dial, clock=dialer.clock):
        pass
    assert dialer.tries == [CONNECT_TRY_S] * 8 and dialer.now == pytest.approx(7 * CONNECT_TRY_S)


def test_a_connect_never_through_ends_at_the_request_s_timeout_not_later():
    dialer = Dialer(drops=10**6)
    with pytest.raises(TimeoutError, match="within 1 s"):
        connect_quickly(("127.0.0.1", 9), 1.0, connect=dialer.dial, clock=dialer.clock)
    assert sum(dialer.tries) == pytest.approx(1.0) and max(dialer.tries) <= CONNECT_TRY_S


def test_a_refused_connect_is_not_tried_again_and_says_no_host():
    calls = []

    def refused(address, timeout):
        calls.append(address)
        raise ConnectionRefusedError(111, "Connection refused")
    with pytest.raises(ConnectionRefusedError):
        connect_quickly(("127.0.0.1", 9), 10.0, connect=refused)
    assert len(calls) == 1
    with socket.socket() as unused:  # a port nobody listens on: the CLI's own words for it
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    client = ControlClient(ControlInfo(url=f"http://127.0.0.1:{port}", token="t", pid=1))
    with pytest.raises(NoHost, match="no host is answering"):
        client.request("GET", "/api/nodes")


def test_the_cli_s_requests_go_through_its_quick_connect(monkeypatch):
    used = []
    real = client_module.connect_quickly

    def spy(address, timeout, **kwargs):
        used.append((address, timeout))
        return real(address, timeout, **kwargs)
    monkeypatch.setattr(client_module, "connect_quickly", spy)
    with closing_server(unanswered=0) as (client, seen):
        assert client.list_nodes() == []
        port = int(client.info.url.rsplit(":", 1)[1])
    assert used == [(("127.0.0.1", port), READ_TIMEOUT_S)] and seen == [b"GET /api/nodes HTTP/1.1"]
