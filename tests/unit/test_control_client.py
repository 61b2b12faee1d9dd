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

from cadre_desktop.cli.client import RESENDS_IDEMPOTENT, ControlClient, ControlInfo
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
