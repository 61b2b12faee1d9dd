"""What others can make us hold is bounded: connections, descriptors, log lines."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys

import pytest

from cadre_desktop.logs import logfilter
from cadre_desktop.net import fdlimit
from cadre_desktop.net.netguard import ConnectionGuard, bind_socket
from cadre_desktop.wire.http1 import HttpServer
from cadre_desktop.wire.httpmsg import Answer
from tests.support.clock import FakeClock
from tests.support.polling import async_wait_until

# -- the connection guard, against the real server every API runs on (wire/http1.py) ---------------

def text(words: str) -> Answer:
    return Answer(200, [("Content-Type", "text/plain")], words.encode())


@pytest.fixture
async def served():
    made = []

    async def serve(guard: ConnectionGuard, handler=None):
        async def hello(request):
            return text("hello")
        server = HttpServer(handler or hello, guard, max_body=1024, body_timeout_s=5)
        await server.start_on([bind_socket("127.0.0.1", 0)], fair=False)  # as the control API listens
        made.append(server)
        return server.port

    yield serve
    for server in made:
        await server.stop(0.1)


async def idle_connection(port: int, source: str = "127.0.0.1"):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def get(port: int, source: str = "127.0.0.1") -> bytes:
    reader, writer = await idle_connection(port, source)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 0.05) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_a_fresh_client_takes_the_place_of_the_oldest_idle_connection(served):
    guard = ConnectionGuard(per_source=4, total=8, idle_s=60)
    port = await served(guard)
    idle = [await idle_connection(port) for _ in range(4)]
    await async_wait_until(lambda: guard.open_connections == 4, what="four held")
    assert b"hello" in await get(port)
    assert await closed(idle[0][0]), "the oldest idle connection should have made room"
    assert not await closed(idle[3][0])
    assert guard.open_connections <= 4 and guard.evicted >= 1


async def test_other_sources_are_not_crowded_out_by_one_and_the_total_is_capped(served):
    guard = ConnectionGuard(per_source=3, total=4, idle_s=60)
    port = await served(guard)
    held = [await idle_connection(port, "127.0.0.1") for _ in range(10)]  # kept open: not collected
    await async_wait_until(lambda: guard.open_connections == 3, what="one source at its cap")
    assert b"hello" in await get(port, "127.0.0.2")
    held += [await idle_connection(port, "127.0.0.3") for _ in range(5)]
    await async_wait_until(lambda: guard.evicted >= 10, what="the total cap to make room")
    assert guard.open_connections <= 4


async def test_a_busy_connection_is_never_evicted_and_a_full_house_of_busy_ones_refuses(served):
    release = asyncio.Event()

    async def slow(request):
        await release.wait()
        return text("late")
    guard = ConnectionGuard(per_source=2, total=2, idle_s=60)
    port = await served(guard, slow)
    busy = [asyncio.create_task(get(port)) for _ in range(2)]
    await async_wait_until(lambda: guard.open_connections == 2 and all(
        c.busy for m in guard._by_source.values() for c in m.values()), what="two busy")
    reader, _ = await idle_connection(port)
    assert await asyncio.wait_for(reader.read(), 5) == b"", "a third connection should be refused"
    assert guard.refused == 1
    release.set()
    assert all(b"late" in r for r in await asyncio.gather(*busy))


async def test_idle_and_half_sent_connections_are_closed_after_the_idle_time(served):
    guard = ConnectionGuard(per_source=10, total=10, idle_s=0.3)
    port = await served(guard)
    quiet_reader, _ = await idle_connection(port)
    half_reader, half_writer = await idle_connection(port)
    half_writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finished
    for _ in range(3):
        await asyncio.sleep(0.15)
        half_writer.write(b"X-Trickle: 1\r\n")  # bytes now and then are not a request
    await async_wait_until(lambda: guard.open_connections == 0, timeout=3, what="both closed")
    assert await closed(quiet_reader) and await closed(half_reader)


async def test_a_connection_busy_with_a_long_request_keeps_no_sweep_waking_until_it_is_idle(served):
    """Issue 38: the sweep ran every idle_s / 4 while any connection was open, so the long-poll the
    host holds on every node woke each node four times per idle time all day for nothing."""
    release = asyncio.Event()

    async def held(request):
        await release.wait()
        return text("news")
    guard = ConnectionGuard(per_source=4, total=8, idle_s=2)
    sweeps: list[bool] = []
    sweep = guard._sweep

    def counted() -> None:
        sweeps.append(True)
        sweep()
    guard._sweep = counted  # type: ignore[method-assign]
    port = await served(guard, held)
    ask = asyncio.create_task(get(port))
    await async_wait_until(lambda: guard.open_connections == 1 and all(
        c.busy for m in guard._by_source.values() for c in m.values()), what="the request held")
    await async_wait_until(lambda: sweeps, timeout=30, what="the sweep set at its connection")
    assert guard._sweeper is None, "a sweep is still set while the only connection is busy"
    release.set()
    assert b"news" in await ask
    await async_wait_until(lambda: guard.open_connections == 0, timeout=10, what="its connection let go")


def streamed(ended: asyncio.Event, chunk: bytes):
    """A handler whose answer streams `chunk` until its client is gone (then `ended` is set)."""
    async def handler(request):
        async def chunks():
            try:
                while True:
                    yield chunk
                    await asyncio.sleep(0)  # a stream's chunks come as they come; here, at once
            finally:
                ended.set()
        return Answer(200, [("Content-Type", "text/event-stream")], b"", stream=chunks())
    return handler


async def test_a_streamed_answer_is_chunked_and_ends_when_its_client_leaves(served):
    guard = ConnectionGuard(per_source=4, total=8, idle_s=60)
    ended = asyncio.Event()
    port = await served(guard, streamed(ended, b"data: x\n\n"))
    reader, writer = await idle_connection(port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    assert b"data: x" in await asyncio.wait_for(reader.readexactly(64), 5)
    writer.transport.abort()  # gone, as a `node watch` stopped with ^C
    await asyncio.wait_for(ended.wait(), 5)
    await async_wait_until(lambda: guard.open_connections == 0, timeout=5, what="its connection let go")


async def test_a_stream_to_a_client_that_does_not_read_is_cut_after_the_idle_time(served):
    guard = ConnectionGuard(per_source=4, total=8, idle_s=0.3)
    ended = asyncio.Event()
    port = await served(guard, streamed(ended, b"x" * 65536))
    reader, writer = await idle_connection(port)
    writer.transport.pause_reading()  # reads nothing: the kernel's buffers fill, then the server waits
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(ended.wait(), 10)
    await async_wait_until(lambda: guard.open_connections == 0, timeout=5, what="the connection cut")
    writer.close()


# -- descriptors -----------------------------------------------------------------------------------

class FakeResource:
    RLIMIT_NOFILE = 7
    RLIM_INFINITY = -1

    def __init__(self, soft, hard, refuse_above=None):
        self.limits = (soft, hard)
        self.refuse_above = refuse_above

    def getrlimit(self, which):
        return self.limits

    def setrlimit(self, which, limits):
        if self.refuse_above is not None and limits[0] > self.refuse_above:
            raise ValueError("not allowed")
        self.limits = limits


@pytest.mark.parametrize("platform, soft, hard, expect", [
    ("linux", 1024, 524288, 524288),
    ("linux", 1024, 1024, 1024),
    ("linux", 1024, -1, 65536),         # unlimited hard limit
    ("darwin", 256, -1, 10240),         # macOS: never above OPEN_MAX
    ("darwin", 256, 4096, 4096),
])
def test_the_soft_descriptor_limit_is_raised_to_the_hard_one_per_platform(platform, soft, hard, expect):
    fake = FakeResource(soft, hard)
    assert fdlimit.raise_soft_limit(platform, fake) == (soft, expect)
    assert fake.limits[0] == expect and fake.limits[1] == hard


def test_windows_has_no_descriptor_limit_to_raise_and_a_refusal_is_not_an_error():
    assert fdlimit.raise_soft_limit("win32", FakeResource(1, 2)) is None
    fake = FakeResource(1024, 4096, refuse_above=2048)
    assert fdlimit.raise_soft_limit("linux", fake) == (1024, 1024)


def test_the_reserve_lets_an_operation_that_met_emfile_try_once_more():
    spare = fdlimit.Reserve(3)
    assert len(spare._fds) == 3
    tries = []

    def needs_a_descriptor():
        tries.append(len(spare._fds))
        if len(tries) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return "saved"
    assert spare.call(needs_a_descriptor) == "saved"
    assert tries == [3, 0], "the retry runs with the reserve freed"
    assert len(spare._fds) == 3, "and the reserve is taken back after"
    with pytest.raises(OSError):
        spare.call(lambda: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    spare.close()


# -- log lines ---------------------------------------------------------------------------------------

def records(logger_name="t", text="node %s did not answer", count=1, start=0):
    return [logging.LogRecord(logger_name, logging.WARNING, "f", 1, text, (i,), None)
            for i in range(start, start + count)]


def test_repeated_lines_pass_a_burst_per_window_then_say_how_many_were_left_out():
    clock = FakeClock()
    repeat = logfilter.RepeatFilter(burst=3, window_s=60, budget=100, clock=clock.monotonic)
    passed = [r for r in records(count=50) if repeat.filter(r)]
    assert len(passed) == 3
    assert "left out" in passed[-1].getMessage()
    other = records(text="something else %s")[0]
    assert repeat.filter(other), "another kind of line is not held back"
    clock.advance(61)
    nxt = records(count=1, start=99)[0]
    assert repeat.filter(nxt) and "47 more like it were left out" in nxt.getMessage()


def test_a_flood_of_different_lines_is_bounded_by_the_budget_but_errors_get_through():
    repeat = logfilter.RepeatFilter(burst=5, window_s=60, budget=10, clock=FakeClock().monotonic)
    lines = [logging.LogRecord("t", logging.INFO, "f", 1, f"line {chr(65 + i % 26)}{chr(65 + i // 26)}", None, None)
             for i in range(200)]
    assert sum(repeat.filter(r) for r in lines) == 10
    error = logging.LogRecord("t", logging.ERROR, "f", 1, "the records file is broken", None, None)
    assert repeat.filter(error)


def test_one_filter_on_two_handlers_judges_each_line_once():
    first, second = logging.Handler(), logging.Handler()
    repeat = logfilter.install([first, second], burst=2)
    for record in records(count=4):
        first.filter(record)
        second.filter(record)
    assert repeat._window_lines == 2


def test_the_loops_os_errors_are_one_line(caplog):
    loop = asyncio.new_event_loop()
    try:
        logfilter.quiet_loop_errors(loop, logging.getLogger("loop"))
        with caplog.at_level(logging.ERROR):
            loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                         "exception": OSError(errno.EMFILE, "Too many open files")})
    finally:
        loop.close()
    (record,) = caplog.records
    assert record.exc_info is None and "Too many open files" in record.getMessage()


def test_bind_socket_refuses_an_address_that_is_not_ours():
    with pytest.raises(OSError):
        bind_socket("192.0.2.1", 0)
    sock = bind_socket("127.0.0.1", 0)
    assert sock.family == socket.AF_INET
    sock.close()


@pytest.mark.skipif(sys.platform == "win32", reason="address reuse is never set on Windows")
def test_bind_socket_reuses_addresses_unless_told_not_to():
    for reuse, expected in ((True, True), (False, False)):
        sock = bind_socket("127.0.0.1", 0, reuse=reuse)
        try:
            assert bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)) is expected
        finally:
            sock.close()
