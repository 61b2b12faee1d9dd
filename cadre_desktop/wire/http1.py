"""HTTP/1.1 for the node's API and the host's (control and lend): h11 (sans-IO, python-hyper) on asyncio.

Why not aiohttp, as before: importing ``aiohttp.web`` loads its whole client side,
yarl, multidict, attrs and the email package, about 95 ms and 12 MB per process (a
node's, and the tray's); each API answers a handful of small JSON routes. h11
parses and frames (request line, headers, chunked and fixed-length bodies,
keep-alive, pipelining, ``Expect: 100-continue``); this module adds what a server
on a LAN must bound (see bench/README.md for the figures):

- the head (request line and headers) to ``MAX_HEAD`` bytes and ``MAX_HEADERS`` lines;
- the body to ``max_body`` bytes *after* decoding (gzip and deflate are decoded as
  aiohttp did, so a small bomb is a 413), arriving within ``body_timeout_s`` (408);
- connections per source and in all, and idle ones (:mod:`cadre_desktop.net.netguard`);
- writing an answer to a client that does not read, to the idle time (each chunk of
  a streamed answer too).

A request that cannot be parsed is answered 400 in plain text, logged as one
printable line, and its connection closed. Stopping closes idle keep-alive
connections at once and gives requests in flight a grace. The routes are the
caller's: one ``handler(Request) -> Answer`` (`wire/httpmsg.py`), and an optional
``access`` hook for its access log.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import h11

from cadre_desktop.errors import ApiError, InputError
from cadre_desktop.net.netguard import ACCEPT_BATCH, Conn, ConnectionGuard, FairAcceptor, bind_fair, reset
from cadre_desktop.text import escape
from cadre_desktop.wire.api import too_large, too_slow, unreadable
from cadre_desktop.wire.httpmsg import Answer, Request

MAX_HEAD = 8192
MAX_HEADERS = 128
READ_CHUNK = 16384
#: After an answer whose request body was not read: how much of it to read and drop, and
#: for how long, so the connection can serve the next request (or close without a reset
#: that could destroy the answer before the client read it).
DRAIN_BYTES = 65536
DRAIN_S = 1.0
#: A stream's buffer limit, asyncio.start_server's.
STREAM_LIMIT = 2**16
REASONS = {
    100: "Continue", 200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized",
    403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
    409: "Conflict", 410: "Gone", 413: "Request Entity Too Large", 429: "Too Many Requests",
    500: "Internal Server Error",
}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

_log = logging.getLogger("cadre.http")
Handler = Callable[[Request], Awaitable[Answer]]
#: Told of each answered request: the request, its target as sent, its status, and its time in seconds.
Access = Callable[[Request, str, int, float], None]


class HttpServer:
    def __init__(self, handler: Handler, guard: ConnectionGuard, *, max_body: int,
                 body_timeout_s: float, log: logging.Logger = _log, access: Access | None = None,
                 label: str = "") -> None:
        self.handler = handler
        self.log = log
        #: What each of its log lines starts with ("control API: "), to tell the servers of one log apart.
        self.label = label
        self.access = access
        self.guard = guard
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s
        self.closing = False
        self._acceptor: FairAcceptor | None = None
        self._servers: list[asyncio.Server] = []
        self._socks: list[socket.socket] = []
        self._port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: Transports being made for accepted sockets (kept referenced until they are).
        self._opening: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        """Listen on (host, port), accepting fairly (netguard.FairAcceptor); OSError if it cannot be bound."""
        await self.start_on(bind_fair(host, port))

    async def start_on(self, socks: list[socket.socket], *, fair: bool = True) -> None:
        """Listen on sockets bound already (closed if it fails), every connection guarded.

        ``fair``: accepted by `netguard.FairAcceptor`, which sheds an address that floods (a
        server the LAN reaches); else as asyncio accepts, the guard alone making room (a
        loopback server, where every client is the one address 127.0.0.1 and none may be shed).
        """
        try:
            if fair:
                acceptor = FairAcceptor(socks, self.guard, self._accepted)
                acceptor.start()
                self._acceptor = acceptor
            else:
                loop = asyncio.get_running_loop()
                for sock in socks:
                    self._servers.append(await loop.create_server(self._protocol, sock=sock, backlog=ACCEPT_BATCH))
        except BaseException:
            for server in self._servers:
                server.close()
            self._servers = []
            for sock in socks:
                sock.close()
            raise
        self._socks = socks
        self._port = int(socks[0].getsockname()[1])

    def _protocol(self) -> asyncio.StreamReaderProtocol:
        loop = asyncio.get_running_loop()
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop), self._connection,
                                            loop=loop)

    @property
    def port(self) -> int:
        return self._port

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Where it listens: (address, port) of each socket; none once stopped."""
        socks = self._socks if self._acceptor is not None or self._servers else []
        return [(str(name[0]), int(name[1])) for name in (sock.getsockname() for sock in socks)]

    def _accepted(self, sock: socket.socket) -> None:
        """A connection the acceptor kept: made a stream, served by `_connection`."""
        if self.closing:
            reset(sock)
            return
        task = asyncio.get_running_loop().create_task(self._stream(sock))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    async def _stream(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, self._connection, loop=loop)
        try:
            await loop.connect_accepted_socket(lambda: protocol, sock)
        except OSError:
            sock.close()  # gone before its transport was made

    async def stop(self, grace_s: float) -> None:
        """Stop listening, close idle connections now, give the busy ones ``grace_s``."""
        self.closing = True
        if self._acceptor is not None:
            self._acceptor.stop()
            self._acceptor = None
        for server in self._servers:
            server.close()  # stops listening; the connections are ours to end, below
        self._servers = []
        self.guard.close()
        pending = set(self._tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve a connection accepted elsewhere (the fleet link's, once its TLS handshake let it in)."""
        await self._connection(reader, writer)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        conn = None if self.closing else self.guard.admit(transport)
        if conn is None:
            transport.abort()  # a reset frees the descriptor now, not after a close handshake
            return
        task = asyncio.current_task()
        assert task is not None  # a connection is served by a task of its own
        self._tasks.add(task)
        try:
            await _Exchange(self, conn, reader, writer).run()
        except (TimeoutError, OSError):
            transport.abort()  # the client went away, or does not read what it asked for
        except asyncio.CancelledError:
            transport.abort()  # stopping, and the grace is over
        except Exception:  # our bug: logged with its traceback; this connection ends, the server goes on
            self.log.exception("%sunexpected error serving a connection", self.label)
            transport.abort()
        finally:
            self.guard.forget(conn)
            self._tasks.discard(task)
            if not transport.is_closing():
                transport.close()


class _Malformed(InputError):
    """The request cannot be understood: a 400, one log line, and the connection closes."""

    code = "malformed_request"


class _Exchange:
    """One connection: requests in turn, each answered before the next is read."""

    def __init__(self, server: HttpServer, conn: Conn, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.conn = conn
        self.reader = reader
        self.writer = writer
        self.h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        peer = writer.get_extra_info("peername")
        self.remote = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else None
        self.eof = False
        self._reset_request()

    def _reset_request(self) -> None:
        self.headers: dict[str, str] = {}
        self.body: bytes | None = None
        self.broken = False  # the body was refused part-way: this connection cannot go on
        #: Events of the body that had arrived with the head, parsed before the handler ran (`_parse_arrived`).
        self.early: list[object] = []

    async def run(self) -> None:
        while True:
            try:
                try:
                    async with asyncio.timeout(self.server.guard.idle_s):
                        event = await self._next_event()
                except TimeoutError:
                    return  # no whole request for the idle time: closed gently (the guard's sweep resets)
                if not isinstance(event, h11.Request):
                    return  # the client closed between requests
                keep = await self._exchange(event)
            except (h11.RemoteProtocolError, _Malformed) as err:
                await self._refuse_malformed(err)
                return
            if not keep:
                await self._close(linger=self.h.their_state is not h11.CLOSED)
                return
            self.h.start_next_cycle()
            self._reset_request()

    async def _next_event(self) -> object:
        """The next h11 event (read until there is one): a Request, Data, EndOfMessage, ConnectionClosed, …"""
        if self.early:
            return self.early.pop(0)
        while True:
            event = self.h.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self.reader.read(READ_CHUNK)
            self.eof = not data
            self.h.receive_data(data)

    async def _exchange(self, request: h11.Request) -> bool:
        """Answer one request; True if the connection can take the next one."""
        if request.http_version not in (b"1.0", b"1.1"):
            raise _Malformed("not HTTP/1.0 or HTTP/1.1")
        if len(request.headers) > MAX_HEADERS:
            raise _Malformed(f"more than {MAX_HEADERS} header lines")
        # h11 bounds a head still arriving; one that came whole in a single read is measured here.
        size = len(request.method) + len(request.target) + sum(len(n) + len(v) + 4 for n, v in request.headers)
        if size > MAX_HEAD:
            raise _Malformed(f"a head over {MAX_HEAD} bytes")
        for name, value in request.headers:
            self.headers.setdefault(name.decode("ascii"), value.decode("latin-1"))
        if "content-length" in self.headers and "transfer-encoding" in self.headers:
            raise _Malformed("both Content-Length and Transfer-Encoding")
        method = request.method.decode("ascii")
        target = request.target.decode("ascii")
        path, query = split_target(target)
        self._parse_arrived()
        self.server.guard.begin(self.conn)
        started = time.monotonic()
        asked = Request(method, path, query, self.headers, self.remote, self._read_body)
        answer = await self.server.handler(asked)
        waiting = self.h.they_are_waiting_for_100_continue
        stream = answer.stream if method != "HEAD" else None
        await self._send(answer.status, answer.headers, answer.body, head_only=method == "HEAD",
                         streamed=stream is not None)
        if stream is not None:
            await self._send_stream(stream)
        if self.server.access is not None:
            self.server.access(asked, target, answer.status, time.monotonic() - started)
        self.server.guard.done(self.conn)
        if self.h.our_state is not h11.DONE or self.server.closing:
            return False
        if self.h.their_state is h11.SEND_BODY and not (self.broken or waiting):
            await self._drain()
        return self.h.their_state is h11.DONE

    def _parse_arrived(self) -> None:
        """Parse what of the body came with the head, waiting for nothing: a broken chunk in it is
        a 400 even when the handler would have answered without reading the body (a refusal before
        it), as aiohttp, which parsed eagerly, answered. At most one read's worth (READ_CHUNK)."""
        while True:
            event = self.h.next_event()  # a RemoteProtocolError: malformed, answered 400
            if event is h11.NEED_DATA:
                return
            self.early.append(event)
            if not isinstance(event, h11.Data):
                return

    async def _read_body(self) -> bytes:
        if self.body is not None:
            return self.body
        max_body = self.server.max_body
        length = self.headers.get("content-length")
        if length is not None and int(length) > max_body:  # h11 checked it is digits
            self.broken = True
            raise too_large(max_body)
        try:
            decoder = _decoder(self.headers.get("content-encoding", ""))
            if self.h.they_are_waiting_for_100_continue:
                self.writer.write(self.h.send(h11.InformationalResponse(status_code=100, headers=[], reason="Continue")))
            async with asyncio.timeout(self.server.body_timeout_s):
                self.body = await self._collect(decoder, max_body)
        except TimeoutError:
            self.broken = True
            raise too_slow(self.server.body_timeout_s) from None
        except ApiError:
            self.broken = True
            raise
        return self.body

    async def _collect(self, decoder: _Inflate | None, max_body: int) -> bytes:
        out = bytearray()
        while True:
            try:
                event = await self._next_event()
            except h11.RemoteProtocolError:
                raise unreadable() from None  # a broken chunk, or the client stopped sending
            if isinstance(event, h11.Data):
                out += decoder.feed(event.data, max_body - len(out)) if decoder else event.data
                if len(out) > max_body:
                    raise too_large(max_body)
            elif isinstance(event, h11.EndOfMessage):
                if decoder is not None:
                    decoder.finish()
                return bytes(out)
            else:
                raise unreadable()

    async def _drain(self) -> None:
        """Read and drop the rest of a body the answer did not need, if it comes soon and is small."""
        budget = DRAIN_BYTES

        async def drop() -> None:
            nonlocal budget
            while budget > 0:
                event = await self._next_event()
                if isinstance(event, h11.Data):
                    budget -= len(event.data)
                else:
                    return

        try:
            async with asyncio.timeout(DRAIN_S):
                await drop()
        except (TimeoutError, h11.RemoteProtocolError):
            pass

    async def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, *,
                    head_only: bool = False, streamed: bool = False) -> None:
        """The answer's head and body; a streamed one's head only (its chunks follow: `_stream`)."""
        length = [] if streamed else [("Content-Length", str(len(body)))]
        all_headers = [("Date", http_date()), *length, *headers]
        if self.server.closing or self.broken:
            all_headers.append(("Connection", "close"))
        data = self.h.send(h11.Response(status_code=status, headers=all_headers, reason=REASONS.get(status, "")))
        if body and not head_only:
            data += self.h.send(h11.Data(data=body))
        if not streamed:
            data += self.h.send(h11.EndOfMessage())
        await self._write(data)

    async def _write(self, data: bytes) -> None:
        self.writer.write(data)
        async with asyncio.timeout(self.server.guard.idle_s):
            await self.writer.drain()

    async def _send_stream(self, stream: AsyncIterator[bytes]) -> None:
        """A streamed answer's chunks as they come (chunked, or to the close for HTTP/1.0), then its end."""
        try:
            async for chunk in stream:
                if chunk:
                    await self._write(self.h.send(h11.Data(data=chunk)))
        finally:
            closing = getattr(stream, "aclose", None)
            if closing is not None:
                await closing()  # its own cleanup runs now, whether the client read to the end or not
        await self._write(self.h.send(h11.EndOfMessage()))

    async def _refuse_malformed(self, err: Exception) -> None:
        if self.eof and isinstance(err, h11.RemoteProtocolError):
            return  # the client closed half-way through a request: nobody to tell
        self.server.guard.done(self.conn)  # refused before or while its handler ran: idle either way
        words = escape(" ".join(str(err).split()), 200)
        # What was wrong, never the line it was wrong in (h11 quotes it: a token in a header or a URL).
        self.server.log.warning("%sa malformed request from %s: %s", self.server.label, self.remote,
                                words.split(": bytearray(", 1)[0])
        if self.h.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.broken = True
            text = b"bad request: " + words.encode("ascii", "replace") + b"\n"  # to its sender only
            await self._send(400, [("Content-Type", "text/plain; charset=utf-8")], text)
        await self._close(linger=True)

    async def _close(self, *, linger: bool) -> None:
        """Close after the last answer; first read (and drop) what the client still sends for
        a moment, so the kernel does not answer it with a reset that may destroy our answer."""
        if linger and not self.server.closing and not self.eof and self.writer.can_write_eof():
            self.writer.write_eof()
            budget = DRAIN_BYTES

            async def discard() -> None:
                nonlocal budget
                while budget > 0 and (chunk := await self.reader.read(READ_CHUNK)):
                    budget -= len(chunk)

            try:
                async with asyncio.timeout(DRAIN_S):
                    await discard()
            except (TimeoutError, OSError):
                pass
        self.writer.close()


class _Inflate:
    """A gzip or deflate body, decoded no further than the body limit allows."""

    def __init__(self, gzip: bool) -> None:
        self.gzip = gzip
        self.obj: Any = None

    def feed(self, data: bytes, room: int) -> bytes:
        if self.obj is None:
            if not data:
                return b""
            if self.gzip:
                wbits = 16 + zlib.MAX_WBITS
            else:  # deflate is meant to be zlib-wrapped; some clients send it raw
                wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
            self.obj = zlib.decompressobj(wbits)
        try:
            out: bytes = self.obj.decompress(data, max(room, 0) + 1)  # one more than fits: too large
            return out
        except zlib.error:
            raise unreadable() from None

    def finish(self) -> None:
        if self.obj is not None and not self.obj.eof:
            raise unreadable()


def _decoder(encoding: str) -> _Inflate | None:
    """As aiohttp did: gzip and deflate are decoded, brotli and zstd refused, others passed through."""
    name = encoding.lower() if encoding.isascii() else encoding
    if name in ("br", "zstd"):
        raise unreadable()
    if name in ("gzip", "deflate"):
        return _Inflate(gzip=name == "gzip")
    return None


def split_target(target: str) -> tuple[str, str]:
    """(the decoded path, the raw query) of a request target; an absolute URL is cut to its path."""
    if not target.startswith("/"):
        scheme, sep, rest = target.partition("://")
        if sep and scheme.lower() in ("http", "https"):
            slash = rest.find("/")
            target = rest[slash:] if slash >= 0 else "/"
    path, _, query = target.partition("?")
    path = path.partition("#")[0]
    query = query.partition("#")[0]
    if "%" in path:
        from urllib.parse import unquote

        path = unquote(path)
    return path, query


_date_cache: tuple[int, str] = (0, "")


def http_date() -> str:
    """Now as an HTTP date (RFC 9110), in English whatever the locale; made once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        t = time.gmtime(now)
        text = f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} " \
               f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
        _date_cache = (now, text)
    return _date_cache[1]
