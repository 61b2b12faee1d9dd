"""What every platform's process calls share: identities, the process table's rows, the spawn.

Nothing here asks which OS it runs on: the platform classes (`linux`, `posix`,
`windows`, behind `seam.ProcessOS`) pick among these helpers and give them the
OS functions they call, so unit tests exercise each platform's class on Linux.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

log = logging.getLogger(__name__)

#: What a child's stdin, stdout or stderr may be: a descriptor, a file, DEVNULL, or nothing.
Stream = int | IO[bytes] | None
ExitCallback = Callable[[int | None], None]


@dataclass(frozen=True)
class Identity:
    """What makes a pid *our* process: its start time, and on Linux the boot it ran in."""

    start_time: str
    boot_id: str | None = None

    def matches(self, other: Identity | None) -> bool:
        if other is None or self.boot_id != other.boot_id:
            return False
        if self.start_time == other.start_time:
            return True
        # psutil's create_time is a float in seconds; allow its rounding, nothing more.
        if self.boot_id is None:
            try:
                return abs(float(self.start_time) - float(other.start_time)) < 0.05
            except ValueError:
                return False
        return False


@dataclass(frozen=True)
class ProcInfo:
    """One live process as the table shows it: who it is and which group and session it is in."""

    pid: int
    pgid: int
    sid: int
    identity: Identity


@dataclass(frozen=True)
class Job:
    """A child's Job object (Windows): its name (kept in state.json) and the OS's handle to it."""

    name: str
    native: object


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its third field (the state letter) on (Linux); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; split after the last ')'.
    return stat[stat.rfind(")") + 2:].split()


#: The node contract's variables all start so (`host/local/launch.py:node_env` sets them).
NODE_VARS_PREFIX = "CADRE_"


def without_node_vars(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without a node's variables: what any child starts from, so that an inherited
    `CADRE_` variable never reaches a node, a standby or a log pump."""
    return {k: v for k, v in env.items() if not k.startswith(NODE_VARS_PREFIX)}


def environment(pid: int) -> dict[str, str]:
    """A process's environment, or {} when it cannot be read (gone, or not ours)."""
    try:
        env: dict[str, str] = psutil.Process(pid).environ()
        return env
    except (psutil.Error, OSError):
        return {}


def psutil_identity(pid: int) -> Identity | None:
    """A process's start time as psutil reads it (seconds, rounded to a millisecond); None: gone."""
    if pid <= 0:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return Identity(start_time=f"{proc.create_time():.3f}")
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def psutil_info(pid: int) -> ProcInfo | None:
    """Group, session and identity of one live POSIX process through psutil and the os module."""
    try:
        pgid, sid = os.getpgid(pid), os.getsid(pid)
    except (OSError, AttributeError):
        return None
    identity = psutil_identity(pid)
    return ProcInfo(pid, pgid, sid, identity) if identity else None


@dataclass
class SignalOps:
    """The OS calls that signal a process or a group; replaced by fakes in unit tests."""

    killpg: Callable[[int, int], None] = getattr(os, "killpg", None)  # type: ignore[assignment]
    kill: Callable[[int, int], None] = os.kill


def signal_quietly(send: Callable[[int, int], None], pid: int, sig: int, what: str) -> None:
    """Send one signal; a process or group already gone (or not ours) is not an error."""
    try:
        send(pid, sig)
    except (ProcessLookupError, PermissionError, OSError) as exc:
        log.debug("%s of %s: %s", what, pid, exc)


def kill_pids(send: Callable[[int, int], None], pids: Sequence[int], sig: int) -> None:
    """Signal single processes (leftovers already checked to be ours); gone ones are skipped."""
    for pid in pids:
        signal_quietly(send, pid, sig, f"signal {sig}")


def spawn(command: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None, stdin: Stream,
          stdout: Stream, stderr: Stream, join: Sequence[Path] = (),
          new_session: bool = True, creationflags: int = 0) -> subprocess.Popen[bytes]:
    """Start a child in a process group of its own (a session: `new_session`, POSIX; or a new
    process group by `creationflags`, Windows), with no descriptor of ours but the three given:
    the one place the package starts a process, so a test sees every start here.

    `join` (Linux): `cgroup.procs` files the child writes itself into between its fork and
    its exec, so its program runs under its caps from its first page. A file that cannot be
    opened is skipped (the caller places the child after the spawn too)."""
    fds = _open_for_join(join)
    try:
        return subprocess.Popen(list(command), env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                                close_fds=True, preexec_fn=_joiner(fds) if fds else None,
                                start_new_session=new_session and not creationflags, creationflags=creationflags)
    finally:
        for fd in fds:
            os.close(fd)


def _open_for_join(paths: Sequence[Path]) -> list[int]:
    fds = []
    for path in paths:
        try:
            fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        except OSError as exc:
            log.debug("cannot open %s for the child to join: %s", path, exc)
    return fds


def _joiner(fds: list[int]) -> Callable[[], None]:
    """What the child runs after its fork: one write of "0" (the writer itself) to each
    descriptor opened before the fork. Nothing else: no lock, no import, no file opened, so a
    fork from a process with threads cannot deadlock on it. A refused write leaves the child
    where it is (the caller places it after the spawn)."""
    def join() -> None:
        for fd in fds:
            try:
                os.write(fd, b"0")
            except OSError:
                pass

    return join


def reap_in_thread(popen: subprocess.Popen[bytes], what: str) -> None:
    """Reap a child just killed on a daemon thread, so an event loop that asks never blocks on a slow death."""
    def reap() -> None:
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("%s %s did not end after a kill", what, popen.pid)

    threading.Thread(target=reap, name=f"reap-{popen.pid}", daemon=True).start()


def end_child(popen: subprocess.Popen[bytes], grace_s: float, terminate: Callable[[int], None],
              kill: Callable[[int], None]) -> int | None:
    """Stop a child we started and wait for it, blocking: `terminate` its group, wait up to
    `grace_s`, then `kill` the group and reap it. Its return code (None if it would not go)."""
    if popen.poll() is not None:
        return popen.returncode
    terminate(popen.pid)
    try:
        return popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill(popen.pid)
    try:
        return popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.error("child %s did not end after a kill", popen.pid)
        return None


#: How a platform watches one exit without a thread: a canceller, or None where it cannot.
FdWatch = Callable[[asyncio.AbstractEventLoop, int, threading.Event, Callable[[], None]], Callable[[], None] | None]


def watch_exit(loop: asyncio.AbstractEventLoop, pid: int, popen: subprocess.Popen[bytes] | None,
               on_exit: ExitCallback, fd_watch: FdWatch | None = None) -> Callable[[], None]:
    """Call `on_exit(returncode)` on the loop as soon as `pid` ends; return a canceller.

    `fd_watch` first (Linux: a pidfd in the loop's reader set, no thread, no polling); else,
    or where it cannot, one waiting thread per child that posts back to the loop. The
    return code is known only for children this host spawned.
    """
    done = threading.Event()

    def fire() -> None:
        if done.is_set():
            return
        done.set()
        code = None
        if popen is not None:
            try:
                code = popen.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = popen.poll()
        on_exit(code)

    cancel = fd_watch(loop, pid, done, fire) if fd_watch is not None else None
    if cancel is not None:
        return cancel
    _watch_in_thread(loop, pid, popen, done, fire)
    return done.set


def _watch_in_thread(loop: asyncio.AbstractEventLoop, pid: int, popen: subprocess.Popen[bytes] | None,
                     done: threading.Event, fire: Callable[[], None]) -> None:
    """Watch with one waiting thread that posts the exit back to the loop."""
    def wait_in_thread() -> None:
        try:
            if popen is not None:
                popen.wait()
            else:
                psutil.Process(pid).wait()
        except psutil.NoSuchProcess:
            pass
        except Exception as exc:  # never let a watcher thread die silently
            log.warning("exit watcher for pid %s failed: %s", pid, exc)
        if not done.is_set() and not loop.is_closed():
            loop.call_soon_threadsafe(fire)

    threading.Thread(target=wait_in_thread, name=f"exit-watch-{pid}", daemon=True).start()


SIGKILL = getattr(signal, "SIGKILL", 9)


class GroupEnding:
    """What every platform ends the same way, given its own `signal_group` and `kill_group`:
    single pids killed, a just-started child killed and reaped off the thread, the blocking
    terminate → grace → kill."""

    signals: SignalOps

    def signal_group(self, pid: int, job: object | None, *, kill: bool) -> None:
        raise NotImplementedError

    def kill_group(self, pid: int) -> None:
        raise NotImplementedError

    def kill_pids(self, pids: Sequence[int]) -> None:
        kill_pids(self.signals.kill, pids, SIGKILL)

    def kill_and_reap(self, popen: subprocess.Popen[bytes], *, what: str = "child") -> None:
        self.kill_group(popen.pid)
        reap_in_thread(popen, what)

    def end_child(self, popen: subprocess.Popen[bytes], grace_s: float) -> int | None:
        return end_child(popen, grace_s, lambda pid: self.signal_group(pid, None, kill=False), self.kill_group)


class NoAdoption:
    """An OS whose host cannot hold a fork server's nodes as its children (all but Linux):
    there, standbys hand themselves over instead of forking."""

    def can_adopt(self) -> bool:
        return False

    def become_subreaper(self) -> bool:
        return False

    def subreaping(self) -> bool:
        return False

    def fork_mark(self) -> int | None:
        return None

    def not_forked(self, pid: int, server_pid: int, since: int | None) -> str | None:
        return "this OS cannot adopt a fork server's node"

    def adopt(self, pid: int, args: Sequence[str]) -> subprocess.Popen[bytes]:
        raise OSError("this OS cannot adopt a fork server's node")

    def reap_stale(self, seen: set[int]) -> tuple[list[int], set[int]]:
        return [], set()
