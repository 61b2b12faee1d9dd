"""The node's own HTTP server (h11 on asyncio streams) against hostile and odd clients.

The real server and guard on 127.0.0.1, in the test's event loop, with a small
echo handler, so each bound (head, headers, body size, body time, connections,
idle time) can be reached with small numbers. The node's routes on this server
are tested black-box against the real node program in the other files.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import sys
import zlib

import pytest

from cadre_desktop.errors import ApiError
from cadre_desktop.net.netguard import ConnectionGuard
from cadre_desktop.node.api import error_answer
from cadre_desktop.node.http1 import node_server
from cadre_desktop.wire.http1 import MAX_HEAD, HttpServer, split_target
from cadre_desktop.wire.httpmsg import Answer, Request
from tests.support.polling import async_wait_until


async def echo(request: Request) -> Answer:
    """`METHOD path length:body` in plain text; errors of the body's limits as the API renders them."""
    try:
        body = await request.body() if request.method == "POST" else b""
    except ApiError as err:
        return error_answer(err)
    line = f"{request.method} {request.path} {len(body)}:".encode()
    return Answer(200, [("Content-Type", "text/plain")], line + body)


@pytest.fixture
async def serve():
    servers: list[HttpServer] = []

    async def start(handler=echo, *, guard: ConnectionGuard | None = None, body_timeout_s: float = 5.0,
                    max_body: int = 4096) -> HttpServer:
        guard = guard or ConnectionGuard(per_source=32, total=128, idle_s=5.0)
        server = node_server(handler, guard, max_body=max_body, body_timeout_s=body_timeout_s)
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop(0.5)


async def connect(port: int, source: str = "127.0.0.1"):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def read_answer(reader: asyncio.StreamReader, *, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(length), 5) if length and not head_only else b""
    return int(lines[0].split()[1]), headers, body


async def closed(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    """True once the server has closed (or reset) the connection."""
    try:
        return await asyncio.wait_for(reader.read(), timeout) == b""
    except ConnectionError:
        return True


async def one(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await connect(port)
    writer.write(raw)
    try:
        return await read_answer(reader)
    finally:
        writer.close()


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


# -- what is answered -----------------------------------------------------------------------------

async def test_keep_alive_and_pipelined_requests_are_answered_in_turn_on_one_connection(serve):
    server = await serve()
    reader, writer = await connect(server.port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_answer(reader))[2] == b"GET /a 0:"
    writer.write(post("/b", b"hello") + b"GET /c?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_answer(reader))[2] == b"POST /b 5:hello"
    status, headers, body = await read_answer(reader)
    assert (status, body) == (200, b"GET /c 0:") and "date" in headers
    writer.close()


async def test_head_answers_the_length_without_the_body_and_http_1_0_closes(serve):
    server = await serve()
    reader, writer = await connect(server.port)
    writer.write(b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.0\r\n\r\n")
    status, headers, _ = await read_answer(reader, head_only=True)
    assert (status, headers["content-length"]) == (200, str(len(b"HEAD /a 0:")))
    assert (await read_answer(reader))[2] == b"GET /b 0:"
    assert await closed(reader)


async def test_the_target_is_split_decoded_and_an_absolute_url_cut_to_its_path():
    assert split_target("/claim?node=n%201") == ("/claim", "node=n%201")
    assert split_target("/st%61tus") == ("/status", "")
    assert split_target("http://192.168.1.20:8080/status?x#frag") == ("/status", "x")
    assert split_target("HTTP://host") == ("/", "")


async def test_expect_100_continue_is_told_to_send_its_body(serve):
    server = await serve()
    reader, writer = await connect(server.port)
    writer.write(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"{}")
    assert (await read_answer(reader))[2] == b"POST /a 2:{}"
    writer.close()


async def test_a_body_the_answer_did_not_need_is_read_past_and_the_connection_goes_on(serve):
    async def refuse(request: Request) -> Answer:
        return error_answer(ApiError(401, "unauthorized", "no token"))
    server = await serve(refuse)
    reader, writer = await connect(server.port)
    writer.write(post("/a", b'{"ttl_s": 60}') + b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_answer(reader))[0] == 401
    assert (await read_answer(reader))[0] == 401  # the second request, on the same connection
    writer.close()


@pytest.mark.parametrize("encoding, body", [
    ("gzip", gzip.compress(b'{"a": 1}')),
    ("deflate", zlib.compress(b'{"a": 1}')),
    ("deflate", zlib.compress(b'{"a": 1}')[2:-4]),  # raw deflate, as some clients send it
    ("x-unknown", b'{"a": 1}'),  # passed through as it is, as aiohttp did
])
async def test_gzip_and_deflate_bodies_are_decoded(serve, encoding, body):
    server = await serve()
    assert (await one(server.port, post("/a", body, f"Content-Encoding: {encoding}")))[2] == b'POST /a 8:{"a": 1}'


@pytest.mark.parametrize("encoding, body", [
    ("gzip", b'{"a": 1}'),  # not gzip at all
    ("gzip", gzip.compress(b'{"a": 1}')[:-6]),  # cut short
    ("br", b'{"a": 1}'),  # not decoded here: refused, never taken as it is
])
async def test_a_body_not_in_its_encoding_is_400_and_the_connection_closes(serve, encoding, body):
    server = await serve()
    reader, writer = await connect(server.port)
    writer.write(post("/a", body, f"Content-Encoding: {encoding}"))
    status, headers, answer = await read_answer(reader)
    assert (status, headers["connection"]) == (400, "close") and b'"bad-request"' in answer
    assert await closed(reader)


# -- bounds -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    post("/a", b"x" * 4097),
    b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",  # refused before any byte of it
    b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"800\r\n" + b"x" * 2048 + b"\r\n") * 3 + b"0\r\n\r\n",
    post("/a", gzip.compress(b'{"a": "' + b"s" * 2_000_000 + b'"}'), "Content-Encoding: gzip"),  # a bomb
])
async def test_a_body_over_the_limit_is_413_declared_chunked_or_compressed(serve, raw):
    server = await serve()
    status, headers, body = await one(server.port, raw)
    assert (status, headers["connection"]) == (413, "close") and b'"body-too-large"' in body


async def test_a_body_that_stalls_is_408_and_the_connection_closes(serve):
    server = await serve(body_timeout_s=0.2)
    reader, writer = await connect(server.port)
    writer.write(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"sec")
    status, _, body = await read_answer(reader)
    assert status == 408 and b'"body-timeout"' in body
    assert await closed(reader)


MALFORMED = {
    "not HTTP": b"GARBAGE\r\n\r\n",
    "a version we do not speak": b"GET /a HTTP/9.9\r\nHost: x\r\n\r\n",
    "a bad header name": b"GET /a HTTP/1.1\r\nHo st: x\r\n\r\n",
    "an escape in the path": b"GET /\x1b[2J\x07 HTTP/1.1\r\nHost: x\r\n\r\n",
    "a NUL in the path": b"GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n",
    "no Host": b"GET /a HTTP/1.1\r\n\r\n",
    "two Hosts": b"GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    "a negative length": b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "two lengths": b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "a length and chunks": b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    "a transfer coding we do not speak": b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
    "a head too long, at once": b"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * MAX_HEAD + b"\r\n\r\n",
    "a request line too long": b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "too many headers": b"GET /a HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(129)) + b"\r\n",
    "bytes that are no text": b"\xff" * 9000 + b"\r\n\r\n",
}


async def test_each_malformed_request_is_400_one_printable_log_line_and_a_closed_connection(serve, caplog):
    server = await serve()
    caplog.set_level(logging.WARNING, logger="cadre.node.http")
    for name, raw in MALFORMED.items():
        reader, writer = await connect(server.port)
        writer.write(raw)
        status, headers, body = await read_answer(reader)
        assert (status, headers["connection"]) == (400, "close"), name
        assert body.startswith(b"bad request: ") and body.count(b"\n") == 1, name
        assert await closed(reader), name
        writer.close()
    lines = [r.getMessage() for r in caplog.records if "malformed request" in r.getMessage()]
    assert len(lines) == len(MALFORMED), lines
    assert all(line.isprintable() and len(line) < 300 for line in lines), lines
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("raw", [b"GET /?token=SECRET-TOKEN HTTP/9.Q\r\nHost: x\r\n\r\n",
                                 b"GET / HTTP/1.1\r\nHost: x\r\nAuthoriz ation: Bearer SECRET-TOKEN\r\n\r\n"],
                         ids=["in the request line", "in a header line"])
async def test_a_malformed_requests_log_line_says_what_was_wrong_but_not_the_line(serve, caplog, raw):
    server = await serve()
    caplog.set_level(logging.WARNING, logger="cadre.node.http")
    reader, writer = await connect(server.port)
    writer.write(raw)
    status, _, _ = await read_answer(reader)
    writer.close()
    (line,) = [r.getMessage() for r in caplog.records if "malformed request" in r.getMessage()]
    assert status == 400 and "illegal" in line and "SECRET-TOKEN" not in line, line


async def test_a_client_that_closes_half_way_through_a_head_is_not_logged(serve, caplog):
    server = await serve()
    caplog.set_level(logging.WARNING, logger="cadre.node.http")
    reader, writer = await connect(server.port)
    writer.write(b"GET /a HTTP/1.1\r\nHo")
    writer.write_eof()
    assert await closed(reader)
    writer.close()
    assert not [r for r in caplog.records if "malformed" in r.getMessage()]


# -- connections --------------------------------------------------------------------------------------

async def test_a_fresh_client_takes_the_place_of_the_oldest_idle_connection(serve):
    guard = ConnectionGuard(per_source=4, total=8, idle_s=60)
    server = await serve(guard=guard)
    idle = [await connect(server.port) for _ in range(4)]
    await async_wait_until(lambda: guard.open_connections == 4, what="four held")
    assert (await one(server.port, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 200
    assert await closed(idle[0][0]), "the oldest idle connection should have made room"
    assert guard.evicted >= 1 and guard.open_connections <= 4


async def test_other_sources_are_not_crowded_out_and_the_total_is_capped(serve):
    guard = ConnectionGuard(per_source=3, total=4, idle_s=60)
    server = await serve(guard=guard)
    held = [await connect(server.port, "127.0.0.1") for _ in range(10)]
    await async_wait_until(lambda: guard.open_connections == 3, what="one source at its cap")
    reader, writer = await connect(server.port, "127.0.0.2")
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_answer(reader))[0] == 200
    held += [await connect(server.port, "127.0.0.3") for _ in range(5)]
    await async_wait_until(lambda: guard.evicted >= 10, what="the total cap to make room")
    assert guard.open_connections <= 4


async def test_a_busy_connection_is_never_evicted_and_a_full_house_of_busy_ones_refuses(serve):
    release = asyncio.Event()

    async def slow(request: Request) -> Answer:
        await release.wait()
        return Answer(200, [], b"late")
    guard = ConnectionGuard(per_source=2, total=2, idle_s=60)
    server = await serve(slow, guard=guard)
    busy = [asyncio.create_task(one(server.port, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")) for _ in range(2)]
    await async_wait_until(lambda: guard.open_connections == 2 and all(
        c.busy for m in guard._by_source.values() for c in m.values()), what="two busy")
    reader, _ = await connect(server.port)
    assert await closed(reader), "a third connection should be refused"
    assert guard.refused == 1
    release.set()
    assert [answer[2] for answer in await asyncio.gather(*busy)] == [b"late", b"late"]


async def test_idle_and_half_sent_connections_are_closed_after_the_idle_time(serve):
    guard = ConnectionGuard(per_source=10, total=10, idle_s=0.3)
    server = await serve(guard=guard)
    quiet_reader, _ = await connect(server.port)
    half_reader, half_writer = await connect(server.port)
    half_writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n")  # never finished

    async def trickle() -> None:
        while not half_reader.at_eof():
            half_writer.write(b"X-Trickle: 1\r\n")  # bytes now and then are not a request
            await asyncio.sleep(0.1)
    trickling = asyncio.create_task(trickle())
    await async_wait_until(lambda: guard.open_connections == 0, timeout=5, what="both closed")
    assert await closed(quiet_reader) and await closed(half_reader)
    trickling.cancel()


async def test_stopping_closes_idle_keep_alive_connections_at_once_and_finishes_requests_in_flight(serve):
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: Request) -> Answer:
        if request.path == "/slow":
            entered.set()
            await release.wait()
        return Answer(200, [], b"done")
    server = await serve(slow)
    idle_reader, idle_writer = await connect(server.port)
    idle_writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_answer(idle_reader))[2] == b"done"  # now an idle keep-alive connection
    busy_reader, busy_writer = await connect(server.port)
    busy_writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(entered.wait(), 5)
    stopping = asyncio.create_task(server.stop(5.0))
    assert await closed(idle_reader, timeout=2), "the idle connection should close before any grace"
    assert not stopping.done()
    release.set()
    status, headers, body = await read_answer(busy_reader)
    assert (status, body, headers["connection"]) == (200, b"done", "close")
    await asyncio.wait_for(stopping, 5)
    assert await closed(busy_reader)


# -- fair accepting ------------------------------------------------------------------------------------

@pytest.mark.skipif(sys.platform != "linux", reason="per-address listen queues are Linux's")
async def test_the_port_is_one_queue_per_address_and_is_never_shared_with_another_server(serve):
    from cadre_desktop.host.local.ports import port_is_free
    from cadre_desktop.net.netguard import QUEUES, bind_fair

    server = await serve()
    assert len(server._acceptor.socks) == QUEUES
    assert not port_is_free("127.0.0.1", server.port)
    with pytest.raises(OSError):
        bind_fair("127.0.0.1", server.port)  # a second server (a stray node) cannot join the group
    for source in ("127.0.0.1", "127.0.0.2", "127.0.0.9"):
        reader, writer = await connect(server.port, source)
        writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await read_answer(reader))[0] == 200
        writer.close()


async def test_a_crowd_from_one_address_at_its_cap_is_reset_at_accept_and_others_are_served(serve):
    guard = ConnectionGuard(per_source=4, total=16, idle_s=60)
    server = await serve(guard=guard)
    held = [await connect(server.port) for _ in range(4)]
    await async_wait_until(lambda: guard.open_connections == 4, what="the address at its cap")
    crowd = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]  # all queued at once
    reader, writer = await connect(server.port, "127.0.0.2")
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_answer(reader))[0] == 200
    await async_wait_until(lambda: server._acceptor.shed >= 30, what="the crowd shed at accept")
    assert guard.held_by("127.0.0.1") <= 4
    for sock in crowd:
        sock.close()
    writer.close()
    del held
