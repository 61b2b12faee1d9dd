"""The small h11 client the host and the node share (cadre_desktop/net/httpclient.py), against raw servers."""

from __future__ import annotations

import asyncio

import pytest

from cadre_desktop.net import httpclient
from tests.support.polling import async_wait_until

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def raw_server(answer, seen: list) -> tuple[asyncio.AbstractServer, int]:
    """Answers each request with `answer(request head)` (bytes), or closes when it is None."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                seen.append((writer, head))
                reply = answer(head)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_kept_connection_is_reused_and_one_the_server_closed_is_retried_on_a_fresh_one():
    seen: list = []
    answers = iter([OK, OK, None, OK])  # the third request finds the kept connection closed by the server
    server, port = await raw_server(lambda _head: next(answers), seen)
    client = httpclient.Client(fresh_after_s=5)
    try:
        assert (await client.request("127.0.0.1", port, "GET", "/status")).body == b"{}"
        assert (await client.request("127.0.0.1", port, "GET", "/status")).status == 200
        assert seen[0][0] is seen[1][0] and client.opened == 1
        answer = await client.request("127.0.0.1", port, "GET", "/status")
        assert answer.status == 200 and client.opened == 2
    finally:
        await client.close()
        server.close()


async def test_without_reuse_each_request_says_connection_close_and_has_its_own():
    seen: list = []
    server, port = await raw_server(lambda _head: OK, seen)
    client = httpclient.Client()
    try:
        for _ in range(2):
            await client.request("127.0.0.1", port, "GET", "/status")
    finally:
        await client.close()
        server.close()
    assert client.opened == 2 and all(b"connection: close" in head.lower() for _, head in seen)


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + b"x" * 70000,  # a body over the bound
    b"HTTP/1.1 200 OK\r\nX-Pad: " + b"p" * 9000 + b"\r\n\r\n",  # a head over the bound
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",  # not HTTP
])
async def test_an_answer_over_its_bounds_or_not_http_is_a_client_error(reply):
    server, port = await raw_server(lambda _head: reply, [])
    try:
        with pytest.raises(httpclient.ClientError):
            await httpclient.request("127.0.0.1", port, "GET", "/status")
    finally:
        server.close()


async def test_a_request_cancelled_while_waiting_closes_its_connection():
    seen: list = []
    server, port = await raw_server(lambda _head: b"", seen)  # reads the request, never answers
    client = httpclient.Client(fresh_after_s=5)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await client.request("127.0.0.1", port, "GET", "/status?wait=25&since=unclaimed")
        writer = seen[0][0]
        await async_wait_until(writer.is_closing, timeout=5, what="the server sees the client's close")
        assert client.opened == 1 and not client._idle  # nothing kept of a request that did not end
    finally:
        await client.close()
        server.close()
