"""Linux: the process seam (`seam.ProcessOS`) through /proc, pidfds, cgroups and a subreaper.

What `PosixOS` does, and: identities and the process table read from /proc (start
times in clock ticks since boot, with the boot's id, so a stepped wall clock never
moves them), an exit watched by a pidfd in the loop's reader set (no thread, no
polling), lock holders from /proc/locks, caps by a systemd scope or a cgroup, and
the nodes a fork server makes held as our own children: this process a subreaper
(`become_subreaper`), each such node an `Adopted` child, and the orphans' zombies
nobody waits for reaped on a slow sweep (`reap_stale`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.posix import PosixOS
from cadre_desktop.host.local.system.procs import ExitCallback, Identity, ProcInfo, SignalOps

log = logging.getLogger(__name__)

#: prctl(2) option that makes orphaned descendants children of this process.
PR_SET_CHILD_SUBREAPER = 36
#: Whether this process made itself a subreaper (process-wide, so here once).
_subreaper: bool | None = None


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def proc_info(pid: int, boot: str | None) -> ProcInfo | None:
    """One process from /proc/<pid>/stat: group, session and its start in clock ticks since boot
    (field 22). A zombie counts as gone: it will never serve anything again."""
    fields = procs.stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        return ProcInfo(pid, int(fields[2]), int(fields[3]), Identity(fields[19], boot))
    except ValueError:
        return None


class LinuxOS(PosixOS):
    """The process calls of Linux."""

    caps_ways: tuple[str, ...] = ("systemd", "cgroup")

    def __init__(self, signals: SignalOps | None = None,
                 prctl: Callable[[int, int], int] | None = None) -> None:
        super().__init__(signals)
        #: A test's prctl: asked, never remembered.
        self._prctl = prctl

    def read_identity(self, pid: int) -> Identity | None:
        if pid <= 0:
            return None
        fields = procs.stat_fields(pid)
        if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
            return None
        return Identity(start_time=fields[19], boot_id=boot_id())

    def process_info(self, pid: int) -> ProcInfo | None:
        return proc_info(pid, boot_id()) if pid > 0 else None

    def process_table(self) -> list[ProcInfo]:
        """Read from /proc directly: one small read per process."""
        found: list[ProcInfo] = []
        boot = boot_id()
        try:
            names = os.listdir("/proc")
        except OSError:
            return found
        for name in names:
            if name.isdigit():
                info = proc_info(int(name), boot)
                if info is not None:
                    found.append(info)
        return found

    def watch_exit(self, loop: asyncio.AbstractEventLoop, pid: int, popen: subprocess.Popen[bytes] | None,
                   on_exit: ExitCallback) -> Callable[[], None]:
        return procs.watch_exit(loop, pid, popen, on_exit, _watch_pidfd)

    def lock_pids(self, st: os.stat_result) -> list[int] | None:
        """Pids /proc/locks names for a lock on this file."""
        try:
            with open("/proc/locks", encoding="ascii", errors="replace") as fh:
                lines = fh.read(1 << 20).splitlines()
        except OSError:
            return []
        want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        pids = []
        for line in lines:
            parts = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a "->" marks a waiter)
            if "->" in parts or len(parts) < 6:
                continue
            if parts[5] == want and parts[4].isdigit():
                pids.append(int(parts[4]))
        return pids

    # -- a fork server's children ---------------------------------------------------------------
    def can_adopt(self) -> bool:
        return getattr(os, "pidfd_open", None) is not None

    def become_subreaper(self) -> bool:
        """Make this process the parent of any descendant orphaned below it (once; True if it
        is). A node forked by a standby's fork server is orphaned at once and so becomes our
        child: we reap it and read its exit code as for any child we started."""
        global _subreaper
        if not self.can_adopt():
            return False
        if self._prctl is not None:
            return self._prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
        if _subreaper is None:
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
            except (OSError, AttributeError) as exc:
                log.debug("cannot become a subreaper: %s", exc)
                _subreaper = False
        return _subreaper

    def subreaping(self) -> bool:
        return bool(_subreaper)

    def fork_mark(self) -> int | None:
        return boot_ticks()

    def not_forked(self, pid: int, server_pid: int, since: int | None) -> str | None:
        return not_forked(pid, server_pid, since)

    def adopt(self, pid: int, args: Sequence[str]) -> subprocess.Popen[bytes]:
        return Adopted(pid, args)

    def reap_stale(self, seen: set[int]) -> tuple[list[int], set[int]]:
        stale, seen = stale_zombies(child_states(), seen)
        reap(stale)
        return stale, seen


def boot_ticks() -> int | None:
    """Now in the clock ticks since boot that /proc dates a process's start in (None: unknown)."""
    try:
        return time.clock_gettime_ns(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK") // 1_000_000_000
    except (AttributeError, OSError, ValueError):
        return None


def not_forked(pid: int, server_pid: int, since: int | None) -> str | None:
    """Why `pid` cannot be the node a fork server just made for this host (None: it is).

    A fork server names its node's pid, and the host would then renice it, move it into a
    node's cgroup and kill it at Remove: a lying (or broken) node program must not get any
    process of the machine so treated. The node contract makes a forked node this process's
    own child (a clone with `CLONE_PARENT`, or orphaned to us as a subreaper, its middle
    process reaped before the answer), the leader of a session of its own, made after the
    request was sent (`since`, `boot_ticks`). A pidfd pins the process while it is looked at,
    and the kernel's `waitid` on it is the proof of parenthood (a process not our child is
    ECHILD), so a pid reused meanwhile is never taken for the one read."""
    if pid <= 1 or pid in (os.getpid(), server_pid):
        return "that is no pid a node of its may have"
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return "no process has that pid"
    except OSError as exc:
        return f"it cannot be looked at ({exc.strerror or exc})"
    try:
        fields = procs.stat_fields(pid)
        try:  # WNOWAIT: a node that already ended stays a zombie, for `Adopted` to reap and tell
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return "it is not this host's child" + _parent_words(fields)
        if fields is None or len(fields) < 20:
            return "it cannot be read in the process table"
        return _born_words(pid, fields, since)
    finally:
        os.close(fd)


def _parent_words(fields: list[str] | None) -> str:
    return f" (its parent is pid {fields[1]})" if fields and len(fields) > 1 else ""


def _born_words(pid: int, fields: list[str], since: int | None) -> str | None:
    """A live child of ours: refused unless it leads its own session and was made after `since`."""
    if fields[3] != str(pid):
        return "it leads no session of its own"
    if since is None:
        return "when it was made cannot be told here"
    try:
        born = int(fields[19])
    except ValueError:
        return "when it was made cannot be read"
    if born < since:
        ticks = os.sysconf("SC_CLK_TCK")
        return f"it was running before the request ({(since - born) / ticks:.2f} s before)"
    return None


def _watch_pidfd(loop: asyncio.AbstractEventLoop, pid: int, done: threading.Event,
                 fire: Callable[[], None]) -> Callable[[], None] | None:
    """Watch through a pidfd in the loop's reader set; None where there is none (an old kernel)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd = pidfd_open(pid)
    except ProcessLookupError:
        loop.call_soon(fire)
        return done.set
    except OSError:
        return None

    def readable() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        fire()

    def cancel() -> None:
        if not done.is_set():
            done.set()
            loop.remove_reader(fd)
            os.close(fd)

    loop.add_reader(fd, readable)
    return cancel


class Adopted(subprocess.Popen[bytes]):
    """A child this process did not fork itself (a node a fork server made, orphaned to us as
    a subreaper), with what the host uses of a `Popen`: `pid`, `returncode`, `poll`, `wait`.
    Its exit code is None when it was reaped by someone else (never ours to know)."""

    def __init__(self, pid: int, args: Sequence[str] = ()) -> None:  # no super(): nothing is started
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None
        self._child_created = False  # Popen.__del__ leaves it alone
        self._lock = threading.Lock()
        self._gone = False

    def __repr__(self) -> str:
        return f"<Adopted pid={self.pid} returncode={self.returncode}>"

    def poll(self) -> int | None:
        self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended (None: not ours to know); TimeoutExpired after `timeout`."""
        if not self._gone and timeout is not None:
            if not _ends_within(self.pid, timeout):
                self._reap(os.WNOHANG)
                if not self._gone:
                    raise subprocess.TimeoutExpired(self.args, timeout)
        self._reap(0)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if not self._gone:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _reap(self, flags: int) -> None:
        with self._lock:
            if self._gone:
                return
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # not (or no longer) our child: gone, its code unknown
                self._gone = True
                return
            if pid == self.pid:
                self._gone = True
                self.returncode = os.waitstatus_to_exitcode(status)


def _ends_within(pid: int, timeout: float) -> bool:
    """Whether `pid` ends within `timeout` s (its pidfd turns readable); True if it is gone."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        readable, _w, _x = select.select([fd], [], [], max(0.0, timeout))
        return bool(readable)
    finally:
        os.close(fd)


def stale_zombies(children: Sequence[tuple[int, str]], seen: set[int]) -> tuple[list[int], set[int]]:
    """Which of our zombie `children` (pid, state) to reap now: those that were zombies at the
    last look already (`seen`) — any child someone of ours waits for is reaped within
    milliseconds of its end, so a zombie that stays is an orphan a subreaper got (a node's own
    child, a desktop opener's), which nobody else will ever wait for. And the zombies to
    remember for the next look."""
    zombies = {pid for pid, state in children if state == "Z"}
    return sorted(zombies & seen), zombies - seen


def child_states(pid: int | None = None) -> list[tuple[int, str]]:
    """This process's children with their state letter, from each thread's children list."""
    me = os.getpid() if pid is None else pid
    found: list[tuple[int, str]] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return found
    pids: set[int] = set()
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children", "rb") as fh:
                pids.update(int(word) for word in fh.read().split())
        except (OSError, ValueError):
            continue
    for child in sorted(pids):
        fields = procs.stat_fields(child)
        if fields:
            found.append((child, fields[0]))
    return found


def reap(pids: Sequence[int]) -> None:
    """Reap zombies nobody waits for (`stale_zombies`); one already gone is skipped."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
