"""Bounds on what clients can make a server hold: connections per source, in total, and idle.

Used by the HTTP/1.1 server every API runs on (`wire/http1.py`: the node's, the host's
control and lend APIs), so it imports nothing of theirs, and no HTTP library. Without it, one process that opens connections and sends nothing
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
- **Fair accepting** (`bind_fair` and `FairAcceptor`, the node's server). A
  flood fills the kernel's queue of connections not yet accepted, and the
  kernel then drops everyone's new connections alike, another device's too:
  on Linux the port is QUEUES listening sockets in one SO_REUSEPORT group, and
  a small classic-BPF program gives each source address the queue its hash
  picks, so a flooding address fills its own queue only. Each queue is deep
  (LISTEN_BACKLOG). Each turn takes what waits (up to ACCEPT_MAX a queue),
  keeps at most ACCEPT_BATCH of one address (its newest: the older ones would
  only have been evicted by them), only one of an address already at its cap
  that sends a crowd, and resets the rest before any transport or task is made
  for them; the addresses with the fewest connections are admitted first. A
  flooding address so costs a few system calls a connection and is shed
  first, even when the CPU is scarce. Elsewhere (or if the kernel refuses the
  program) the port is one socket, still accepted this way.

A connection is *busy* while a handler runs for it (the middleware below
marks it); long-lived streams (the event stream) are busy and never evicted,
and count against the caps.
"""

from __future__ import annotations

import array
import asyncio
import errno
import logging
import socket
import struct
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Accepted per loop turn, and the kernel's queue of connections not yet accepted. A
#: connection accepted in one turn has its request read in the next and its handler
#: started in the one after; keeping `per_source` at least twice this means a client
#: that sends its request at once is busy before two batches could evict it.
ACCEPT_BATCH = 16
#: Each of `bind_fair`'s kernel queues of connections not accepted yet (the OS caps it at
#: its somaxconn).
LISTEN_BACKLOG = 1024
#: Connections `FairAcceptor` takes from one queue in one loop turn.
ACCEPT_MAX = 128
#: Listening sockets (kernel queues) of one port on Linux, one picked per source address; a power of 2.
QUEUES = 8


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

    def held_by(self, source: str) -> int:
        """Connections open from `source` now."""
        return len(self._by_source.get(source, ()))

    # -- idle connections ------------------------------------------------------------

    # The sweep wakes the loop only when an idle connection is due: a timer for the oldest idle
    # one's end, none while every connection is busy (a long-poll the host holds on every node all
    # day woke each node four times per `idle_s` for nothing: bench/README.md, issue 38). Whenever a
    # connection is idle a sweep is set for no later than its end: one becoming idle with none set
    # is the only idle one, so its end is the soonest.

    def _schedule_sweep(self, loop: asyncio.AbstractEventLoop, due: float | None = None) -> None:
        if self._sweeper is None:
            wait = self.idle_s if due is None else due - loop.time()
            self._sweeper = loop.call_later(max(0.2, wait), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.idle_s
        soonest: float | None = None
        for mine in list(self._by_source.values()):
            for transport, conn in list(mine.items()):
                if conn.busy:
                    continue
                if conn.idle_since <= cutoff:
                    self._drop(conn)
                    transport.abort()
                elif soonest is None or conn.idle_since < soonest:
                    soonest = conn.idle_since
        if soonest is not None:
            self._schedule_sweep(loop, soonest + self.idle_s)

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
        loop = asyncio.get_running_loop()
        conn.busy = max(0, conn.busy - 1)
        conn.idle_since = loop.time()
        if not conn.busy and conn.transport in self._by_source.get(conn.source, {}):
            self._schedule_sweep(loop)


def bind_socket(host: str, port: int, *, reuse: bool = True,
                also: tuple[tuple[int, int, int], ...] = ()) -> socket.socket:
    """A TCP socket bound to (host, port), with address reuse on POSIX (a respawn must not
    wait out the old process's TIME_WAIT connections); Windows' SO_REUSEADDR would let two
    processes share a port, so not there. `reuse=False` for a port the kernel picks (0):
    it gives a free one anyway, and nothing comes back to it. `also`: more options, set before the bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if reuse and sys.platform != "win32":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for level, option, value in also:
            sock.setsockopt(level, option, value)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def source_of(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, (tuple, list)) and peer else "?"


def reset(sock: socket.socket) -> None:
    """Close with a reset: the descriptor and the kernel's state go now (no FIN_WAIT, no TIME_WAIT)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def bind_fair(host: str, port: int, *, platform: str = sys.platform) -> list[socket.socket]:
    """The listening sockets of (host, port), bound, not listening yet: on Linux QUEUES in one
    SO_REUSEPORT group that steers each source address to one of them; else one socket.
    OSError (EADDRINUSE) when anything holds the port, a socket of the same group's kind included."""
    first = bind_socket(host, port)  # without SO_REUSEPORT: fails if anyone holds the port
    if platform != "linux" or not hasattr(socket, "SO_REUSEPORT"):
        return [first]
    port = first.getsockname()[1]
    first.close()
    group: list[socket.socket] = []
    try:
        for index in range(QUEUES):
            sock = bind_socket(host, port, also=((socket.SOL_SOCKET, socket.SO_REUSEPORT, 1),))
            group.append(sock)
            if index == 0 and not _steer_by_source(sock, ipv6=":" in host):
                return group  # the kernel refused the program: one queue, as elsewhere
    except OSError:
        for sock in group:
            sock.close()
        if group:  # taken between the check and the group (a race): say so like a taken port
            raise
        return [bind_socket(host, port)]
    return group


#: SO_ATTACH_REUSEPORT_CBPF (Linux): the program that picks a socket of a SO_REUSEPORT group.
_ATTACH_REUSEPORT_CBPF = 51
_NET = -0x100000  # SKF_NET_OFF: loads relative to the IP header


def _steer_by_source(sock: socket.socket, *, ipv6: bool) -> bool:
    """Attach: queue = top bits of (last 32 bits of the source address * golden ratio)."""
    shift = 32 - (QUEUES.bit_length() - 1)
    program = [
        (0x30, 0, 0, (_NET + 0) & 0xFFFFFFFF),    # ldb [net+0]: version and header length
        (0x74, 0, 0, 4),                          # rsh #4: the IP version
        (0x15, 0, 2, 6),                          # jeq #6 ? next : +2
        (0x20, 0, 0, (_NET + 20) & 0xFFFFFFFF),   # ld [net+20]: IPv6, the source's last 32 bits
        (0x05, 0, 0, 1),                          # ja +1
        (0x20, 0, 0, (_NET + 12) & 0xFFFFFFFF),   # ld [net+12]: IPv4, the source
        (0x24, 0, 0, 0x9E3779B1),                 # mul #golden ratio
        (0x74, 0, 0, shift),                      # rsh: the top bits, 0..QUEUES-1
        (0x16, 0, 0, 0),                          # ret a
    ]
    # struct sock_filter {u16 code; u8 jt, jf; u32 k}, in a buffer whose address the kernel is given (no
    # ctypes: defining its Structure class cost a node's start 0.3 ms, on the path of every respawn).
    insns = array.array("B", b"".join(struct.pack("=HBBI", *insn) for insn in program))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _ATTACH_REUSEPORT_CBPF,
                        struct.pack("@HP", len(program), insns.buffer_info()[0]))
    except OSError as exc:
        log.info("one listening queue for port %s (no SO_REUSEPORT program: %s)", sock.getsockname()[1],
                 exc.strerror or exc)
        return False
    return True


class FairAcceptor:
    """Accepts on listening sockets (`bind_fair`'s) for a guarded server, fairly by address.

    `on_accepted(sock)` gets each socket kept (non-blocking); it makes the
    transport, and its connection passes `guard.admit` as any other.
    """

    def __init__(self, socks: list[socket.socket], guard: ConnectionGuard,
                 on_accepted: Callable[[socket.socket], None]) -> None:
        self.socks = socks
        self.guard = guard
        self.on_accepted = on_accepted
        self._loop: asyncio.AbstractEventLoop | None = None
        self._paused: asyncio.TimerHandle | None = None
        #: Connections reset at accept because their address sent more than a turn's share.
        self.shed = 0

    @property
    def port(self) -> int:
        return int(self.socks[0].getsockname()[1])

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for sock in self.socks:
            sock.setblocking(False)
            sock.listen(LISTEN_BACKLOG)
        self._watch()

    def _watch(self) -> None:
        assert self._loop is not None
        for sock in self.socks:
            self._loop.add_reader(sock.fileno(), self._ready, sock)

    def _unwatch(self) -> None:
        if self._loop is not None:
            for sock in self.socks:
                self._loop.remove_reader(sock.fileno())

    def stop(self) -> None:
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        self._unwatch()
        self._loop = None
        for sock in self.socks:
            sock.close()

    def _ready(self, listening: socket.socket) -> None:
        waiting: list[tuple[socket.socket, str]] = []
        for _ in range(ACCEPT_MAX):
            try:
                conn, peer = listening.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause(exc)  # out of descriptors: the idle sweep frees some; try again shortly
                    break
                continue  # one connection that went away before we took it
            waiting.append((conn, source_of(peer)))
        for conn in self._fair(waiting):
            conn.setblocking(False)
            self.on_accepted(conn)

    def _fair(self, waiting: list[tuple[socket.socket, str]]) -> list[socket.socket]:
        """The newest ACCEPT_BATCH of each address (the rest reset), fewest-connected addresses first."""
        by_source: dict[str, list[socket.socket]] = {}
        for conn, source in waiting:
            by_source.setdefault(source, []).append(conn)
        kept: list[tuple[int, socket.socket]] = []
        for source, conns in by_source.items():
            held = self.guard.held_by(source)
            # An address at its cap that sends a crowd at once is flooding: one newcomer of it a turn.
            share = 1 if held >= self.guard.per_source and len(conns) > 1 else ACCEPT_BATCH
            for conn in conns[:-share]:
                reset(conn)
                self.shed += 1
            kept += [(held, conn) for conn in conns[-share:]]
        kept.sort(key=lambda pair: pair[0])
        return [conn for _, conn in kept]

    def _pause(self, exc: OSError) -> None:
        if self._loop is None or self._paused is not None:
            return
        log.warning("%s: cannot accept connections (%s); pausing for a moment", self.guard.name,
                    exc.strerror or exc)
        self._unwatch()
        self._paused = self._loop.call_later(0.2, self._resume)

    def _resume(self) -> None:
        self._paused = None
        if self._loop is not None:
            self._watch()
