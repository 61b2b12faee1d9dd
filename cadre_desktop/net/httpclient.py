"""A small HTTP/1.1 client on h11 over asyncio streams, for the host and the node alike.

The host asks each node it runs for its ``/status`` and a node for an invitation;
a joining node posts its invitation to another node. None of it needs a whole
client library: importing aiohttp's client cost the tray about 17 MB (bench/README.md,
issue 26), and h11 is what the node already serves with.

The other side is anyone's program: the head of its answer is bounded (``MAX_HEAD``
bytes), its body too (``max_body``, after which :class:`ClientError`), and anything
that is not an HTTP/1.1 answer is a :class:`ClientError`. The caller bounds the time
(``async with asyncio.timeout``); a request cancelled half-way closes its connection.

A :class:`Client` keeps one idle connection per server for ``fresh_after_s`` after an
answer (0: none, every request has its own and says ``Connection: close``). Past that
a request opens a fresh connection, so a server that stopped accepting is seen as not
answering rather than read through a connection it accepted long ago. A kept
connection the server closed meanwhile is retried once on a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import NamedTuple

import h11

from cadre_desktop.errors import NodeFault
from cadre_desktop.text import url_host

MAX_HEAD = 8192
MAX_BODY = 64 * 1024
READ_CHUNK = 16384


class ClientError(NodeFault):
    """The other side answered something that is not a bounded HTTP/1.1 answer."""

    code = "bad_answer"


class Response(NamedTuple):
    status: int
    #: Lower-case names, the first value of each.
    headers: dict[str, str]
    body: bytes


class _Conn:
    __slots__ = ("reader", "writer", "h", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.idle_since = 0.0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Client:
    """Requests to any number of servers; see the module's docstring for its connections."""

    def __init__(self, *, fresh_after_s: float = 0.0, max_body: int = MAX_BODY, tls: object = None) -> None:
        self.fresh_after_s = fresh_after_s
        #: An `ssl.SSLContext` to speak TLS with (the fleet link's), else plain HTTP; typed loosely so
        #: this module, which the node shares, never imports ssl.
        self.tls = tls
        self.max_body = max_body
        self._idle: dict[tuple[str, int], _Conn] = {}
        #: Connections opened in all (tests and the benchmarks read it).
        self.opened = 0

    async def request(self, host: str, port: int, method: str, target: str, *,
                      headers: Iterable[tuple[str, str]] = (), body: bytes | None = None) -> Response:
        """One request; its answer, bounded. OSError when the server cannot be reached."""
        head = [("Host", f"{url_host(host)}:{port}"), *headers]
        if body is not None:
            head.append(("Content-Length", str(len(body))))
        if self.fresh_after_s <= 0:
            head.append(("Connection", "close"))
        kept = self._take(host, port)
        if kept is not None:
            with contextlib.suppress(_ClosedEarly, ConnectionError):
                return await self._exchange(host, port, kept, method, target, head, body)
            # the server let the kept connection go before answering: once more, on a fresh one
        if self.tls is None:
            reader, writer = await asyncio.open_connection(host, port)
        else:
            reader, writer = await asyncio.open_connection(host, port, ssl=self.tls, server_hostname="")
        self.opened += 1
        try:
            return await self._exchange(host, port, _Conn(reader, writer), method, target, head, body)
        except _ClosedEarly as err:
            raise ClientError(str(err)) from None

    def _take(self, host: str, port: int) -> _Conn | None:
        conn = self._idle.pop((host, port), None)
        if conn is None:
            return None
        if time.monotonic() - conn.idle_since < self.fresh_after_s and not conn.writer.is_closing():
            return conn
        conn.close()
        return None

    async def _exchange(self, host: str, port: int, conn: _Conn, method: str, target: str,
                        head: list[tuple[str, str]], body: bytes | None) -> Response:
        keep = False
        try:
            data = conn.h.send(h11.Request(method=method, target=target, headers=head))
            if body is not None:
                data += conn.h.send(h11.Data(data=body))
            data += conn.h.send(h11.EndOfMessage())
            conn.writer.write(data)
            await conn.writer.drain()
            answer = await self._answer(conn)
            if self.fresh_after_s > 0 and conn.h.our_state is h11.DONE and conn.h.their_state is h11.DONE:
                conn.h.start_next_cycle()
                conn.idle_since = time.monotonic()
                old = self._idle.pop((host, port), None)
                if old is not None:
                    old.close()
                self._idle[(host, port)] = conn
                keep = True
            return answer
        except h11.ProtocolError as err:
            raise ClientError(f"not an HTTP answer: {err}") from None
        finally:
            if not keep:
                conn.close()

    async def _answer(self, conn: _Conn) -> Response:
        response: h11.Response | None = None
        body = bytearray()
        while True:
            event = conn.h.next_event()
            if event is h11.NEED_DATA:
                data = await conn.reader.read(READ_CHUNK)
                if not data and response is None:
                    raise _ClosedEarly("the connection closed before an answer")
                conn.h.receive_data(data)
            elif isinstance(event, h11.Response):
                # h11 bounds a head still arriving; one that came whole in a single read is measured here.
                if sum(len(name) + len(value) + 4 for name, value in event.headers) > MAX_HEAD:
                    raise ClientError(f"an answer's head over {MAX_HEAD} bytes")
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body:
                    raise ClientError(f"an answer over {self.max_body} bytes")
            elif isinstance(event, h11.EndOfMessage) and response is not None:
                headers: dict[str, str] = {}
                for name, value in response.headers:
                    headers.setdefault(name.decode("ascii"), value.decode("latin-1"))
                return Response(response.status_code, headers, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                if response is None:
                    raise _ClosedEarly("the connection closed before an answer")
                raise ClientError("the connection closed in the middle of an answer")
            # an InformationalResponse (100 Continue): the answer follows

    async def close(self) -> None:
        """Close every kept connection."""
        idle, self._idle = self._idle, {}
        for conn in idle.values():
            conn.close()


class _ClosedEarly(ClientError):
    """Closed before any answer: a kept connection the server let go meanwhile."""


async def request(host: str, port: int, method: str, target: str, *,
                  headers: Iterable[tuple[str, str]] = (), body: bytes | None = None,
                  max_body: int = MAX_BODY) -> Response:
    """One request on a connection of its own."""
    return await Client(max_body=max_body).request(host, port, method, target, headers=headers, body=body)
