"""A child parked ahead by each fork server: the next start takes a process forked already.

A fork server (`standby`, docs/node-contract.md "Fork server") is asked, once a node's child
has ended unasked (a crash, a kill: `want`) and again a moment after each take, to park one child (`forks.park`, on a worker thread):
the host's own child, loaded, in a session of its own, holding no identity, no port and no
work folder. The next start of any node, lone or in a crowd, takes it (`forks.take`: the
node's variables and its output over the child's own socket); the fork server stays in the
pool and forks the next one off the critical path. So a respawn after a kill costs a
message and the node's own set-up, never the fork's copy of an 18 MB process's page tables
(bench/README.md, "The respawn figures").

Only while heals are wanted: a node that ended unasked is the likeliest to end again, so the
first such exit parks a child for the next start, and after KEEP_S without another the parked
child is ended, giving the process back: an idle host runs N + 3 processes (its nodes, the log
keeper, the fork server, itself), a host healing its nodes N + 4.

What it costs: one more process per fork server (its pages its own, `node/warm/forking.py`'s
`_own_pages`; bench/README.md gives its PSS), and the node it becomes keeps those pages its own,
as a standby handed over did. So none is parked again during a crowd of starts (a storm, a host's
first pass, adds in a row: starts or exits within a second, the pool's `calm`), whose nodes
but the first all fork and share the fork server's pages; the next is parked once it is over.
What never happens: a parked child serving before it is taken (it has no identity to serve as), one counted against any node, or one
left running when its fork server goes (ended with it). A parked child that dies is
replaced after a pause that doubles while they keep dying; after GIVE_UP_AFTER in a row, or
a fork server that refuses to park (an older node program), starts fork as they come.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import threading
from collections.abc import Callable

from cadre_desktop.host.local import forks
from cadre_desktop.host.local.system.seam import ProcessOS

log = logging.getLogger(__name__)

#: Whether fork servers park a child ahead (tests turn it off to see forks on request).
PARK = True
#: How long after a take the next child is parked (the taken node's set-up goes first), and how
#: often a crowd of starts is looked at again: none is parked while one lasts.
AGAIN_S = 0.1
GIVE_UP_AFTER = 3
FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 60.0
#: How long after a node's last unasked exit parked children are kept (then ended, until the next).
KEEP_S = 600.0


class Parked:
    """A parked child: its process (adopted: the host's own child) and the host's end of its socket."""

    def __init__(self, popen: subprocess.Popen[bytes], channel: socket.socket) -> None:
        self.popen = popen
        self.channel: socket.socket | None = channel
        self.lock = threading.Lock()
        self.cancel_watch: Callable[[], None] | None = None

    def close(self) -> None:
        if self.cancel_watch is not None:
            self.cancel_watch()
            self.cancel_watch = None
        if self.channel is not None:
            self.channel.close()
            self.channel = None


class Parking:
    """One parked child per fork server (the pool names the server), replaced as it is used or dies."""

    def __init__(self, system: ProcessOS, calm: Callable[[], bool] = lambda: True) -> None:
        self.system = system
        #: Whether starts are calm now (no crowd): a child is parked only then (`_ask`).
        self.calm = calm
        #: Parks work for this program: a lone start then forks rather than taking the server itself.
        self.enabled = PARK
        self._children: dict[int, Parked] = {}  # by the fork server's pid
        self._asking: set[int] = set()
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._deaths = 0
        self._closed = False
        #: Parking wanted (`want`: a node's child ended unasked) until this loop time; then none is kept.
        self._wanted_until = float("-inf")
        self._unwanted: asyncio.TimerHandle | None = None

    def want(self, server: forks.ForkServer | None) -> None:
        """A node's child ended unasked: a child parked for the next start (for `server`, the ready
        fork server, if any), kept until KEEP_S pass without another such exit."""
        loop = asyncio.get_running_loop()
        self._wanted_until = loop.time() + KEEP_S
        if self._unwanted is not None:
            self._unwanted.cancel()
        self._unwanted = loop.call_later(KEEP_S, self._calm_long)
        if server is not None:
            self.park_soon(server)

    def _calm_long(self) -> None:
        """KEEP_S without an unasked exit: the parked children are ended (one process each back)."""
        self._unwanted = None
        self._end_all()

    def _end_all(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for child in self._children.values():
            self._end(child)
        self._children.clear()

    def parked(self, server: forks.ForkServer) -> Parked | None:
        return self._children.get(server.popen.pid)

    def park_soon(self, server: forks.ForkServer, delay: float = 0.0) -> None:
        """Ask `server` for a parked child on a later loop turn (none while one is parked or asked for)."""
        pid = server.popen.pid
        if not self.enabled or self._closed or pid in self._children or pid in self._asking or pid in self._timers:
            return
        if asyncio.get_running_loop().time() >= self._wanted_until:  # no unasked exit lately: none parked
            return
        self._timers[pid] = asyncio.get_running_loop().call_later(delay, self._ask, server)

    def _ask(self, server: forks.ForkServer) -> None:
        pid = server.popen.pid
        self._timers.pop(pid, None)
        if self._closed or server.channel is None or server.popen.poll() is not None:
            return
        if not self.calm():  # in a crowd of starts every node forks and shares the server's pages: park after it
            self.park_soon(server, AGAIN_S)
            return
        self._asking.add(pid)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, forks.park, server, self.system)
        future.add_done_callback(lambda done: self._answered(server, done))

    def _answered(self, server: forks.ForkServer,
                  done: asyncio.Future[tuple[tuple[subprocess.Popen[bytes], socket.socket] | None, bool]]) -> None:
        pid = server.popen.pid
        self._asking.discard(pid)
        try:
            made, refused = done.result()
        except Exception as exc:  # never lose the loop's callback to a bug here
            log.error("asking the fork server (pid %s) to park a child failed: %s", pid, exc)
            made, refused = None, False
        if refused:
            self.enabled = False
            return
        if made is None:
            return  # the server was ended; its replacement is asked when it is ready
        child = Parked(*made)
        if self._closed or server.channel is None or server.popen.poll() is not None:
            self._end(child)
            return
        self._children[pid] = child
        child.cancel_watch = self.system.watch_exit(asyncio.get_running_loop(), child.popen.pid, child.popen,
                                                    lambda _code: self._died(server, child))

    def take(self, server: forks.ForkServer) -> Parked | None:
        """On the loop: the server's parked child for one start (the caller's from here on), the next
        one asked for a moment later; None: none is parked now (the start forks)."""
        child = self._children.get(server.popen.pid)
        if child is None:
            return None
        del self._children[server.popen.pid]
        if child.cancel_watch is not None:  # the node's own watch follows it from here on
            child.cancel_watch()
            child.cancel_watch = None
        if child.popen.poll() is not None or child.channel is None:
            self._end(child)
            self._note_death(server)
            return None
        self.park_soon(server, AGAIN_S)
        return child

    def taken(self) -> None:
        """A parked child became its node: the deaths in a row start again."""
        self._deaths = 0

    def _died(self, server: forks.ForkServer, child: Parked) -> None:
        if self._children.get(server.popen.pid) is not child:
            return
        del self._children[server.popen.pid]
        child.cancel_watch = None
        child.close()
        log.info("a parked child (pid %s) ended before it was taken; another is parked", child.popen.pid)
        self._note_death(server)

    def _note_death(self, server: forks.ForkServer) -> None:
        self._deaths += 1
        if self._deaths >= GIVE_UP_AFTER:
            log.info("parked children keep ending (%d in a row); starts fork as they come", self._deaths)
            self.enabled = False
            return
        self.park_soon(server, min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** (self._deaths - 1)))

    def forget(self, server: forks.ForkServer) -> None:
        """The fork server leaves the pool (ended, handed over, dead): its parked child is ended."""
        pid = server.popen.pid
        timer = self._timers.pop(pid, None)
        if timer is not None:
            timer.cancel()
        child = self._children.pop(pid, None)
        if child is not None:
            self._end(child)

    def _end(self, child: Parked) -> None:
        child.close()
        self.system.kill_and_reap(child.popen, what="parked child")

    def close(self) -> None:
        self._closed = True
        if self._unwanted is not None:
            self._unwanted.cancel()
            self._unwanted = None
        self._end_all()
