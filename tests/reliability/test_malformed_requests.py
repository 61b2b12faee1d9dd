"""Malformed requests to the control API are answered, and logged as one short line each.

Anyone on this machine can connect to the control API without a token. A
request aiohttp cannot even parse used to write a full traceback to host.log
each time; now each is answered 400 and logged as one printable line, and a
flood of them is rate-limited, so the log stays small.
"""

from __future__ import annotations

import socket

import pytest

from tests.support.headless import host_settings

MALFORMED = {
    "bad header value": b"GET /api/nodes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: twelve\r\n\r\n",
    "bad header name": b"GET /api/nodes HTTP/1.1\r\nHo st: 127.0.0.1\r\n\r\n",
    "escape in the path": b"GET /api/\x1b[2J\x07 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "bad chunk": b"POST /api/nodes HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "bad version": b"GET /api/nodes HTTP/9.Q\r\nHost: 127.0.0.1\r\n\r\n",
}


def send(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)  # and read until the server closes: a 400 always closes
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        return answer


@pytest.fixture
def host(hosts, rng):
    return hosts(host_settings(rng)).start()


def host_log(host) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((host.home / "logs").glob("host.log*")))


def test_each_malformed_request_is_answered_400_and_logged_as_one_line(host):
    port = int(host.control["url"].rsplit(":", 1)[1])
    before = host_log(host).count("\n")
    for name, raw in MALFORMED.items():
        answer = send(port, raw)
        assert answer.split(b" ", 2)[1:2] == [b"400"], (name, answer[:80])
    log = host_log(host)
    lines = log.splitlines()[before:]
    malformed = [line for line in lines if "malformed request" in line]
    assert len(malformed) == len(MALFORMED), lines
    assert "Traceback" not in log and "Traceback" not in host.stderr()
    assert all(line.isprintable() and len(line) < 400 for line in malformed)


def test_a_flood_of_malformed_requests_keeps_the_log_small(host):
    port = int(host.control["url"].rsplit(":", 1)[1])
    size = len(host_log(host))
    for i in range(300):
        send(port, b"GET /api/nodes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x%d\r\n\r\n" % i)
    grown = len(host_log(host)) - size
    assert grown < 5 * 1024, f"host.log grew {grown} bytes for 300 malformed requests"
    assert "left out" in host_log(host)
