"""Bounds on what clients can make a server hold: connections per source, in total, and idle.

Used by the host's control API (through `host/edges/webguard.py`, its aiohttp
adapter) and by the node's own HTTP server (`node/http1.py`), so it imports
nothing from either, and no HTTP library: the node serves without aiohttp. Without it, one process that opens connections and sends nothing
(or half a request) holds a descriptor each until the process runs out, and
then nothing works: no respawn, no save, no answer to anyone.

- **Caps.** At most `per_source` connections from one address and `total` in
  all. A new connection over a cap takes the place of the *oldest idle* one
  (connected or between requests, no handler running) of the same source, or
  of the busiest source for the total cap; one with no idle connection to
  replace is refused (reset at once). A fresh client, such as the CLI or the
  host's probe, so gets in past a crowd of idle ones.
- **Idle and half-sent connections** are closed `idle_s` after they last
  finished a request (or connected): a client that trickles half a request
  never counts as busy.
- **Accepts per loop turn** are limited (the listen backlog is also asyncio's
  batch size), so a burst of new connections never evicts a client whose
  request already arrived before the loop had a turn to read it (see
  ACCEPT_BATCH). Put the guard's middleware first, so a handler is marked busy
  before its first await.

A connection is *busy* while a handler runs for it (the middleware below
marks it); long-lived streams (the event stream) are busy and never evicted,
and count against the caps.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

log = logging.getLogger(__name__)

#: Accepted per loop turn, and the kernel's queue of connections not yet accepted. A
#: connection accepted in one turn has its request read in the next and its handler
#: started in the one after; keeping `per_source` at least twice this means a client
#: that sends its request at once is busy before two batches could evict it.
ACCEPT_BATCH = 16


class Conn:
    __slots__ = ("transport", "source", "idle_since", "busy")

    def __init__(self, transport: asyncio.BaseTransport, source: str, now: float) -> None:
        self.transport = transport
        self.source = source
        self.idle_since = now
        self.busy = 0


class ConnectionGuard:
    def __init__(self, *, per_source: int, total: int, idle_s: float, name: str = "server") -> None:
        self.per_source = max(1, per_source)
        self.total = max(self.per_source, total)
        self.idle_s = idle_s
        self.name = name
        self._by_source: dict[str, OrderedDict[Any, Conn]] = {}
        self._count = 0
        self._sweeper: asyncio.TimerHandle | None = None
        #: How many connections were refused or evicted (read by tests and the log line).
        self.refused = 0
        self.evicted = 0

    # -- admission ----------------------------------------------------------------

    def admit(self, transport: asyncio.BaseTransport) -> Conn | None:
        loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else "?"
        mine = self._by_source.get(source)
        if mine is not None and len(mine) >= self.per_source and not self._evict_from(source):
            self._refuse(source)
            return None
        if self._count >= self.total:
            busiest = max(self._by_source, key=lambda s: len(self._by_source[s]), default=None)
            if busiest is None or not self._evict_from(busiest):
                self._refuse(source)
                return None
        conn = Conn(transport, source, loop.time())
        self._by_source.setdefault(source, OrderedDict())[transport] = conn
        self._count += 1
        self._schedule_sweep(loop)
        return conn

    def _refuse(self, source: str) -> None:
        if self.refused % 1000 == 0:
            log.warning("%s: refusing connections from %s: %d open, the most allowed",
                        self.name, source, self._count)
        self.refused += 1
        return None

    def _evict_from(self, source: str) -> bool:
        """Close the oldest idle connection of `source`; False if it has none."""
        for transport, conn in self._by_source.get(source, {}).items():
            if not conn.busy:
                self._drop(conn)
                transport.abort()
                self.evicted += 1
                return True
        return False

    def _drop(self, conn: Conn) -> None:
        mine = self._by_source.get(conn.source)
        if mine is not None and mine.pop(conn.transport, None) is not None:
            self._count -= 1
            if not mine:
                del self._by_source[conn.source]

    def forget(self, conn: Conn) -> None:
        self._drop(conn)

    @property
    def open_connections(self) -> int:
        return self._count

    # -- idle connections ------------------------------------------------------------

    def _schedule_sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._sweeper is None:
            self._sweeper = loop.call_later(max(0.2, self.idle_s / 4), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.idle_s
        for mine in list(self._by_source.values()):
            for transport, conn in list(mine.items()):
                if not conn.busy and conn.idle_since <= cutoff:
                    self._drop(conn)
                    transport.abort()
        if self._count:
            self._schedule_sweep(loop)

    def close(self) -> None:
        """The server stops: idle connections are closed now.

        Otherwise the server's shutdown waits out its whole grace for each
        idle keep-alive connection (the host's probe keeps one to every node),
        and a Quit of many nodes takes that grace instead of milliseconds.
        Connections with a request in flight keep the grace.
        """
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for mine in list(self._by_source.values()):
            for transport, conn in list(mine.items()):
                if not conn.busy:
                    self._drop(conn)
                    transport.close()

    # -- busy while a handler runs ------------------------------------------------------

    def begin(self, conn: Conn) -> None:
        """A request's handler starts for `conn`: never evicted until `done`."""
        conn.busy += 1

    def done(self, conn: Conn) -> None:
        """The answer is written: `conn` is idle from now (unless another request runs)."""
        conn.busy = max(0, conn.busy - 1)
        conn.idle_since = asyncio.get_running_loop().time()

    def find(self, transport: Any) -> Conn | None:
        if transport is None:
            return None
        peer = transport.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else "?"
        return self._by_source.get(source, {}).get(transport)

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Guarded(self, inner())


class _Guarded(asyncio.Protocol):
    """Admits a connection before aiohttp sees it; forwards everything else unchanged."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner: Any = inner
        self._conn: Conn | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._conn = self._guard.admit(transport)
        if self._conn is None:
            cast(asyncio.Transport, transport).abort()  # a reset frees the descriptor now, not after a close handshake
            self._inner = None
            return
        self._inner.connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._conn is not None:
            self._guard.forget(self._conn)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else False

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def bind_socket(host: str, port: int, *, reuse: bool = True) -> socket.socket:
    """A TCP socket bound to (host, port), with address reuse on POSIX (a respawn must not
    wait out the old process's TIME_WAIT connections); Windows' SO_REUSEADDR would let two
    processes share a port, so not there. `reuse=False` for a port the kernel picks (0):
    it gives a free one anyway, and nothing comes back to it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if reuse and sys.platform != "win32":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock
