"""Bounds on what clients can make the node's API hold: connections per source, in all, and idle.

Anyone on the LAN can connect to a node. Without bounds, one device that opens
connections and sends nothing (or half a request) holds a descriptor each until
the node runs out, and then the host's probe and the person's phone get nothing.
The policy is the host's (:mod:`cadre_desktop.netguard`, which wraps aiohttp;
the node serves without it, see :mod:`http1`):

- **Caps.** At most ``per_source`` connections from one address and ``total`` in
  all. A new connection over a cap takes the place of the *oldest idle* one of
  the same source (or of the busiest source, for the total cap); with none idle
  to replace, the newcomer is reset at once. A fresh client, such as the host's
  probe, so gets in past a crowd of idle ones.
- **Idle and half-sent connections** close ``idle_s`` after they connected or last
  finished a request: trickling half a request never counts as busy.
- A connection is *busy* from its request's head until its answer is written;
  busy ones are never evicted, and on stop they keep the server's grace while idle
  ones close at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

log = logging.getLogger("cadre.node.http")

#: Accepted per loop turn, and the kernel's queue of connections not yet accepted. A
#: connection accepted in one turn has its request read in a later one; keeping
#: ``per_source`` at least twice this means a client that sends its request at once
#: is busy before two batches could evict it.
ACCEPT_BATCH = 16


class Conn:
    __slots__ = ("transport", "source", "idle_since", "busy")

    def __init__(self, transport: asyncio.BaseTransport, source: str, now: float) -> None:
        self.transport = transport
        self.source = source
        self.idle_since = now
        self.busy = False


class ConnectionGuard:
    def __init__(self, *, per_source: int, total: int, idle_s: float) -> None:
        self.per_source = max(1, per_source)
        self.total = max(self.per_source, total)
        self.idle_s = idle_s
        self._by_source: dict[str, OrderedDict[Any, Conn]] = {}
        self._count = 0
        self._sweeper: asyncio.TimerHandle | None = None
        #: How many connections were refused or evicted (read by tests and the log line).
        self.refused = 0
        self.evicted = 0

    @property
    def open_connections(self) -> int:
        return self._count

    def admit(self, transport: asyncio.BaseTransport) -> Conn | None:
        """Count a new connection in, making room if the caps allow; None: reset it."""
        loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else "?"
        mine = self._by_source.get(source)
        if mine is not None and len(mine) >= self.per_source and not self._evict_from(source):
            return self._refuse(source)
        if self._count >= self.total:
            busiest = max(self._by_source, key=lambda s: len(self._by_source[s]), default=None)
            if busiest is None or not self._evict_from(busiest):
                return self._refuse(source)
        conn = Conn(transport, source, loop.time())
        self._by_source.setdefault(source, OrderedDict())[transport] = conn
        self._count += 1
        if self._sweeper is None:
            self._sweeper = loop.call_later(max(0.2, self.idle_s / 4), self._sweep)
        return conn

    def forget(self, conn: Conn) -> None:
        mine = self._by_source.get(conn.source)
        if mine is not None and mine.pop(conn.transport, None) is not None:
            self._count -= 1
            if not mine:
                del self._by_source[conn.source]

    def done(self, conn: Conn) -> None:
        """The connection's answer is written: it is idle from now."""
        conn.busy = False
        conn.idle_since = asyncio.get_running_loop().time()

    def close_idle(self) -> None:
        """The server stops: idle connections close now, busy ones keep their grace."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for mine in list(self._by_source.values()):
            for transport, conn in list(mine.items()):
                if not conn.busy:
                    self.forget(conn)
                    transport.close()

    def _refuse(self, source: str) -> None:
        if self.refused % 1000 == 0:
            log.warning("node API: refusing connections from %s: %d open, the most allowed", source, self._count)
        self.refused += 1
        return None

    def _evict_from(self, source: str) -> bool:
        """Reset the oldest idle connection of ``source``; False if it has none."""
        for transport, conn in self._by_source.get(source, {}).items():
            if not conn.busy:
                self.forget(conn)
                transport.abort()
                self.evicted += 1
                return True
        return False

    def _sweep(self) -> None:
        self._sweeper = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.idle_s
        for mine in list(self._by_source.values()):
            for transport, conn in list(mine.items()):
                if not conn.busy and conn.idle_since <= cutoff:
                    self.forget(conn)
                    transport.abort()
        if self._count:
            self._sweeper = loop.call_later(max(0.2, self.idle_s / 4), self._sweep)
