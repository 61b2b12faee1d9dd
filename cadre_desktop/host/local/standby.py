"""Warm starts: one node program kept loaded in standby, handed to the next start.

A node program that supports it (docs/node-contract.md, "Standby") is started ahead with
`CADRE_STANDBY=1` and nothing else of a node: it loads its code, then waits on stdin. When a node
needs starting, the orchestrator takes the standby, writes the node's `CADRE_` variables (secrets
included) to its stdin as one JSON line, gives its output pipe to the node's log pump, and tracks it
as the node's child; a new standby is started in the background. So a respawn costs the node's own
set-up (identity, state, binding), not loading Python and its libraries.

A standby is used only once it is known to work: its stdin is one end of a socket pair, on which it
says `ready` once loaded (until then it is not offered; one that does not within READY_S is
dropped), and `taken` right after it read its line. At the hand-over the host first checks that it
still runs (not exited, not stopped; `claim`, on the loop), then waits at most HANDOVER_S for
`taken` (`hand_over`, on the start's thread: the loop goes on); a standby that fails either check is
killed and the same start goes on cold, so a hung or dead standby costs the node nothing (no
attempt, no start grace).

What never happens: a standby answering as a node (it has no identity and no port until told), a
secret on a command line or in the standby's environment (the socket only), a standby counted
against any node. One that dies is replaced quietly after a pause that doubles while they keep
dying, and after a few deaths in a row without a hand-over the program is taken to lack support and
started cold from then on. The pool is of one program: the orchestrator makes a new one when
`node_command` changes. POSIX only: Windows children start cold.

Where the host can hold a fork server's nodes as its children (Linux with pidfds) and the standby
says `ready fork clone` (or `ready fork`: it forks twice, and the host makes itself a subreaper,
`ProcessOS.become_subreaper`), the standby is not used up: it is a *fork server*. In a crowd of
starts (`CROWD_S`, `START_UP_S`) each start sends it one request with the node's variables and the
write end of the node's output pipe (`forks.fork`, on the start's thread, one request at a time per
standby); the node it makes is the host's own child (a clone with `CLONE_PARENT`, or two forks and
the host a subreaper: pidfd, exit code, reaping as for a child it started), in a session of its own
and its cgroups from its first instruction, and it answers `forked <pid>`. Such a start costs the
node's own set-up and a clone, never loading Python: in a storm every victim starts warm from the
same standby. A fork server keeps a child parked ahead while nodes end unasked (`parked`), which the
next start takes first (else a lone start takes the fork server); one that fails a request is ended
and replaced like any standby, and that start goes on cold. Zombies of orphans a subreaper host got that nobody waits for (a node's
own children) are reaped by a slow sweep (`SWEEP_S`).

Where no standby forks, a burst of starts (a storm of exits) grows the pool for a moment: a take
that follows another within BURST_WINDOW_S doubles how many standbys are kept, up to `burst` (BURST;
no setting names it), loaded one after another so they never all compete with the starts at once;
CALM_S after the last take the extra ones are ended and one is kept again. A standby beyond the
first is a standby like any other: one that fails costs no node anything."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cadre_desktop.host.local.parked import Parked, Parking
from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.linux import Adopted
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.net.fdlimit import call_with_reserve, is_shortage

log = logging.getLogger(__name__)

STANDBY_VAR = "CADRE_STANDBY"
#: Deaths in a row, none handed over, after which the program is started cold.
GIVE_UP_AFTER = 3
FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 60.0
#: How long a standby may take to load and say `ready`.
READY_S = 60.0
#: How long a start waits for the standby's `taken` (it blocks the start: a healthy
#: standby answers within milliseconds, its read already waiting).
HANDOVER_S = 1.0
#: The most standbys kept at once during a burst of starts, how close two takes must be to
#: count as one, and how long after the last take the pool keeps its extra standbys.
BURST = 4
BURST_WINDOW_S = 5.0
CALM_S = 30.0
READY, READY_FORK, READY_CLONE, TAKEN = b"ready", b"ready fork", b"ready fork clone", b"taken\n"
#: Whether a standby that offers forks is used as a fork server (tests turn it off to see hand-overs).
FORK = True
#: Starts this close to another start or exit, or to the pool's creation (a host's first pass),
#: are a crowd: they fork from a fork server; a lone start takes the standby itself.
CROWD_S = 1.0
START_UP_S = 10.0
#: How often zombies nobody waits for are looked for while forks are used (two looks reap one).
SWEEP_S = 30.0
#: Process states in which a standby cannot take a node over.
_UNFIT = {psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD,
          getattr(psutil, "STATUS_TRACING_STOP", "tracing-stop")}


@dataclass
class Standby:
    popen: subprocess.Popen[bytes]
    #: The read end of its output pipe (the pump gets it) and the write end (the header goes first).
    out_read: int
    out_write: int
    #: The host's end of the socket pair that is the standby's stdin: its line goes out, `ready` and `taken` come back.
    channel: socket.socket | None = None
    #: A fork server: it can stay in the pool and fork each node (`forks.fork`), or be handed over.
    forks: bool = False
    #: This claim forks from it (it stays the pool's); else it is handed over.
    forking: bool = False
    #: One fork request at a time on its channel.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cancel_watch: Callable[[], None] | None = field(default=None, repr=False)
    _heard: bytes = field(default=b"", repr=False)

    def unwatch(self) -> None:
        if self._cancel_watch is not None:
            self._cancel_watch()
            self._cancel_watch = None

    def close_fds(self) -> None:
        for fd in (self.out_read, self.out_write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.out_read = self.out_write = -1
        if self.channel is not None:
            self.channel.close()
            self.channel = None


class StandbyPool:
    """One standby of the node program (up to `burst` for a moment in a burst of starts),
    refilled in the background, one loading at a time."""

    def __init__(self, command: list[str], cwd: Path, env: Callable[[], dict[str, str]], system: ProcessOS,
                 burst: int | None = None) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.base_env = env
        self.system = system
        self.enabled = system.warm_starts
        self.burst = max(1, BURST if burst is None else burst)
        #: How many standbys are wanted now (1, more for a moment after a burst of takes).
        self.wanted = 1
        self._standbys: list[Standby] = []
        #: Started, not `ready` yet.
        self._loading: Standby | None = None
        self._load_timer: asyncio.TimerHandle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._calm: asyncio.TimerHandle | None = None
        self._last_take = -BURST_WINDOW_S
        self._deaths = 0
        self._closed = False
        #: A standby here forked, or may (Linux): one fork server serves any burst then.
        self._may_fork = False
        self._sweep: asyncio.TimerHandle | None = None
        self._zombies: set[int] = set()
        self._created = time.monotonic()
        #: The last claim, and the last two unrequested exits (`note_exit`): what makes a crowd.
        self._last_claim = -CROWD_S
        self._exits: list[float] = []
        #: Each fork server's child parked ahead, which a start takes before anything else.
        self.parking = Parking(system, calm=lambda: not self._crowded(start_up=False))

    @property
    def ready(self) -> Standby | None:
        """The standby the next start gets (None: it starts cold)."""
        return self._standbys[0] if self._standbys else None

    @property
    def standbys(self) -> int:
        return len(self._standbys)

    # -- filling -----------------------------------------------------------------------

    def _full(self) -> bool:
        return self._loading is not None or len(self._standbys) >= self.wanted

    def fill_soon(self, delay: float = 0.0) -> None:
        """Start a standby on a later loop turn (never inside the start that took the last one)."""
        if not self.enabled or self._closed or self._full() or self._timer is not None:
            return
        self._timer = asyncio.get_running_loop().call_later(delay, self._fill)

    def _fill(self) -> None:
        self._timer = None
        if self._closed or self._full():
            return
        try:
            self._loading = self._start()
        except OSError as exc:
            log.warning("could not start a standby node program (%s); nodes start cold", exc.strerror or exc)
            if is_shortage(exc):  # the machine's trouble, not the program's: no death counted
                self.fill_soon(MAX_PAUSE_S)
            else:
                self._died()
            return
        loop = asyncio.get_running_loop()
        assert self._loading.channel is not None
        loop.add_reader(self._loading.channel.fileno(), self._on_heard, self._loading)
        self._load_timer = loop.call_later(READY_S, self._load_timed_out, self._loading)

    def _start(self) -> Standby:
        env = procs.without_node_vars(self.base_env())
        env[STANDBY_VAR] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        out_read, out_write = call_with_reserve(os.pipe)
        try:
            ours, theirs = call_with_reserve(socket.socketpair)
        except BaseException:
            os.close(out_read)
            os.close(out_write)
            raise
        try:
            self.cwd.mkdir(parents=True, exist_ok=True)
            popen = call_with_reserve(self.system.spawn, self.command, env=env, cwd=self.cwd, stdin=theirs.fileno(),
                                      stdout=out_write, stderr=out_write)
        except BaseException:
            os.close(out_read)
            os.close(out_write)
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        standby = Standby(popen, out_read, out_write, channel=ours)
        standby._cancel_watch = self.system.watch_exit(asyncio.get_running_loop(), popen.pid, popen,
                                                       lambda _code: self._on_exit(standby))
        return standby

    def _on_heard(self, standby: Standby) -> None:
        """The loading standby wrote on its socket: `ready` makes it the one offered."""
        if standby is not self._loading or standby.channel is None:
            return
        try:
            data = standby.channel.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        standby._heard += data
        line, newline, _rest = standby._heard.partition(b"\n")
        if newline and line in (READY, READY_FORK, READY_CLONE):
            self._stop_listening(standby)
            self._loading = None
            # A fork server keeps its output pipe: a lone start hands it over like any standby.
            standby.forks = line != READY and self._forking(subreaper=line == READY_FORK)
            self._standbys.append(standby)
            if standby.forks:
                self.parking.park_soon(standby)
            self.fill_soon()  # the next one, if a burst wants more
        elif newline or not data or len(standby._heard) > 64:  # end of file, or something else: no standby
            self._drop(standby, "its standby said something else than ready" if data else "")

    def _forking(self, subreaper: bool) -> bool:
        """Whether a standby that offers forks is used so: Linux with pidfds, and for one that
        forks twice (not `ready fork clone`) this host made a subreaper, so its nodes come to us."""
        if not FORK or not self.system.can_adopt() or (subreaper and not self.system.become_subreaper()):
            return False
        if not self._may_fork:
            log.info("warm starts in a crowd fork from a loaded node program (its nodes are this host's children)")
        self._may_fork = True
        return True

    def _load_timed_out(self, standby: Standby) -> None:
        if standby is self._loading:
            self._drop(standby, f"a standby did not load within {READY_S:.0f} s")

    def _stop_listening(self, standby: Standby) -> None:
        if self._load_timer is not None and standby is self._loading:
            self._load_timer.cancel()
            self._load_timer = None
        if standby.channel is not None:
            try:
                asyncio.get_running_loop().remove_reader(standby.channel.fileno())
            except (RuntimeError, ValueError):
                pass

    def _drop(self, standby: Standby, why: str) -> None:
        """A loading or ready standby that cannot be used: ended, and counted as a death of the pool."""
        if why:
            log.info("%s; it is ended and another loaded", why)
        self._stop_listening(standby)
        if standby is self._loading:
            self._loading = None
        if standby in self._standbys:
            self._standbys.remove(standby)
        standby.unwatch()
        self._discard(standby)
        self._died()

    def _on_exit(self, standby: Standby) -> None:
        if standby not in self._standbys and standby is not self._loading:
            return  # handed over (the node's own watch reports it) or already dropped
        self._stop_listening(standby)
        if standby is self._loading:
            self._loading = None
        else:
            self._standbys.remove(standby)
        self.parking.forget(standby)
        standby.close_fds()
        self._died()

    def _died(self) -> None:
        self._deaths += 1
        if self._deaths >= GIVE_UP_AFTER:
            log.info("the node program exits in standby (%d times in a row); nodes start cold", self._deaths)
            self.enabled = False
            return
        self.fill_soon(min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** (self._deaths - 1)))

    # -- handing over ----------------------------------------------------------------------

    def claim(self) -> Standby | Parked | None:
        """On the loop: the ready standby for one start (None: start cold). Handed over, it is out
        of the pool and the caller's from here on: `hand_over` (blocking: on the start's thread)
        tells it who it is. A fork server in a crowd of starts (a storm, a host's first pass)
        stays the pool's (`forking`): `forks.fork` asks it for the node. Either way `settle` (the
        loop again) counts how that went. A fork server's parked child goes first (`parked`);
        without one a lone start forks where parks work, else hands even a fork server over
        (a loaded process answers a few milliseconds sooner than a fork, whose first writes copy pages)."""
        standby = self.ready
        child = self.parking.take(standby) if standby is not None and standby.forks else None
        if child is not None:
            self._last_claim = time.monotonic()
            return child
        forking = standby is not None and standby.forks and (self._crowded() or self.parking.enabled)
        self._last_claim = time.monotonic()
        if not forking:
            self._note_take()
        if standby is None:
            return None
        if not _still_fit(standby):
            self._drop(standby, f"the standby (pid {standby.popen.pid}) no longer runs; this start is cold")
            return None
        standby.forking = forking
        if forking:
            return standby
        self._standbys.remove(standby)
        self.parking.forget(standby)
        standby.unwatch()
        return standby

    def note_exit(self) -> None:
        """A node's child ended unasked (on the loop): two close together make a crowd; a child parked (`want`)."""
        self._exits = [*self._exits[-1:], time.monotonic()]
        self.parking.want(self.ready if self.ready is not None and self.ready.forks else None)

    def _crowded(self, start_up: bool = True) -> bool:  # `start_up` False: starts and exits only (parks)
        now = time.monotonic()
        return ((start_up and now - self._created < START_UP_S) or now - self._last_claim < CROWD_S
                or (len(self._exits) == 2 and now - self._exits[0] < CROWD_S))

    def settle(self, claimed: Standby | Parked, child: subprocess.Popen[bytes]) -> None:
        """On the loop, once the start that claimed a standby has its `child`: a standby handed
        over (or a parked child) is that child, or (ended already) counts as a death; a fork
        server made it, or failed (ended then, another loaded)."""
        if isinstance(claimed, Parked):
            if child is claimed.popen:
                self._deaths = 0
                self.parking.taken()
                self._sweep_soon()
            return
        if not claimed.forking:
            if child is claimed.popen:
                self._deaths = 0
            else:
                self._died()
            return
        server, forked = claimed, isinstance(child, Adopted)
        if forked:
            self._deaths = 0
            self._sweep_soon()
        elif server in self._standbys:
            self._drop(server, f"the fork server (pid {server.popen.pid}) did not fork its node; this start is cold")

    def _sweep_soon(self) -> None:
        if self._sweep is None and not self._closed and self.system.subreaping():
            self._sweep = asyncio.get_running_loop().call_later(SWEEP_S, self._look_for_zombies)

    def _look_for_zombies(self) -> None:
        """Reap, off the loop, the orphans' zombies nobody waits for (`ProcessOS.reap_stale`)."""
        self._sweep = None
        if self._closed:
            return

        def look() -> None:
            stale, self._zombies = self.system.reap_stale(self._zombies)
            if stale:
                log.info("reaping %d orphaned process(es) nobody waited for", len(stale))
        asyncio.get_running_loop().run_in_executor(None, look)
        self._sweep = asyncio.get_running_loop().call_later(SWEEP_S, self._look_for_zombies)

    def _note_take(self) -> None:
        """A take soon after the last one is a burst: keep more standbys (bounded) until calm."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._may_fork:  # one fork server serves any burst
            return
        if now - self._last_take <= BURST_WINDOW_S and self.wanted < self.burst:
            self.wanted = min(self.burst, self.wanted * 2)
            log.info("a burst of starts: keeping up to %d standbys for a while", self.wanted)
        self._last_take = now
        if self._calm is not None:
            self._calm.cancel()
        self._calm = loop.call_later(CALM_S, self._calmed) if self.wanted > 1 else None

    def _calmed(self) -> None:
        """No take for CALM_S: back to one standby, the extra ones ended (they cost memory)."""
        self._calm = None
        self.wanted = 1
        while len(self._standbys) > self.wanted:
            extra = self._standbys.pop()
            extra.unwatch()
            self._discard(extra)

    def _discard(self, standby: Standby) -> None:
        self.parking.forget(standby)
        _discard(standby, self.system)

    def close(self) -> None:
        """End the standby (a standby without its host is of no use to anyone)."""
        self._closed = True
        self.parking.close()
        for timer in (self._timer, self._calm, self._sweep):
            if timer is not None:
                timer.cancel()
        self._timer = self._calm = self._sweep = None
        for standby in (*self._standbys, self._loading):
            if standby is not None:
                self._stop_listening(standby)
                standby.unwatch()
                self._discard(standby)
        self._standbys, self._loading = [], None


def hand_over(standby: Standby, env: dict[str, str], header: bytes, system: ProcessOS) -> bool:
    """Tell a claimed standby who it is (blocking, up to HANDOVER_S; safe on any thread). Its log
    header goes into its output pipe first, then the line; the write end is closed, so its log's
    reader sees end-of-file when the node ends. False: it did not take over, and it was ended."""
    line = json.dumps({"env": {k: v for k, v in env.items() if k.startswith(procs.NODE_VARS_PREFIX)}}).encode() + b"\n"
    try:
        os.write(standby.out_write, header)
        with standby.lock:  # after any park request still in flight on its channel
            taken = _hand_over(standby, line, HANDOVER_S)
    except (OSError, ValueError):
        taken = False
    finally:
        line = b""
    if not taken:
        log.warning("the standby (pid %s) did not take its node over within %.1f s; ended, this start is cold",
                    standby.popen.pid, HANDOVER_S)
        _discard(standby, system)
        return False
    if standby.channel is not None:
        standby.channel.close()
        standby.channel = None
    os.close(standby.out_write)
    standby.out_write = -1
    return True


def _discard(standby: Standby, system: ProcessOS) -> None:
    system.kill_and_reap(standby.popen, what="standby")
    standby.close_fds()


def _still_fit(standby: Standby) -> bool:
    """It runs, and is not stopped (SIGSTOP), traced or a zombie: it can read its line now."""
    if standby.popen.poll() is not None or standby.channel is None:
        return False
    try:
        return psutil.Process(standby.popen.pid).status() not in _UNFIT
    except psutil.Error:
        return False


def _hand_over(standby: Standby, line: bytes, within_s: float) -> bool:
    """Send the node's line and wait, bounded, for the standby's `taken`."""
    channel = standby.channel
    assert channel is not None
    deadline = time.monotonic() + within_s
    channel.settimeout(within_s)
    channel.sendall(line)
    heard = b""
    while not heard.endswith(b"\n") and len(heard) < len(TAKEN):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        channel.settimeout(left)
        try:
            data = channel.recv(len(TAKEN) - len(heard))
        except TimeoutError:
            return False
        if not data:
            return False
        heard += data
    return heard == TAKEN
