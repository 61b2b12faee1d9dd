"""The one seam between the orchestrator and the operating system's processes.

Everything platform-specific about a child lives here: how it is started in a
group of its own (so the host's death does not take it down), how its identity
is read (pid plus start time, so a reused pid is never taken for our child),
how its group is terminated and killed, and how its exit is noticed.

Each branch takes the platform name and the OS functions it calls as
arguments, so unit tests exercise the Windows and macOS branches on Linux.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

CURRENT = sys.platform


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


def _linux_boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _linux_identity(pid: int) -> Identity | None:
    """Start time in clock ticks since boot from /proc/<pid>/stat (field 22).

    Unlike psutil's create_time, this does not move when the wall clock steps.
    A zombie counts as gone: it will never serve anything again.
    """
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return Identity(start_time=fields[19], boot_id=_linux_boot_id())


@dataclass(frozen=True)
class ProcInfo:
    """One live process as the table shows it: who it is and which group and session it is in."""

    pid: int
    pgid: int
    sid: int
    identity: Identity


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its third field (the state letter) on (Linux); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; split after the last ')'.
    return stat[stat.rfind(")") + 2:].split()


def _linux_stat(pid: int, boot_id: str | None) -> ProcInfo | None:
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        return ProcInfo(pid, int(fields[2]), int(fields[3]), Identity(fields[19], boot_id))
    except ValueError:
        return None


def process_table(platform: str = CURRENT) -> list[ProcInfo]:
    """Every live (non-zombie) process with its group and session; POSIX only.

    Linux reads /proc directly (one small read per process); elsewhere psutil
    lists the pids and the os module gives group and session.
    """
    found: list[ProcInfo] = []
    if platform.startswith("linux"):
        boot = _linux_boot_id()
        try:
            names = os.listdir("/proc")
        except OSError:
            return found
        for name in names:
            if name.isdigit():
                info = _linux_stat(int(name), boot)
                if info is not None:
                    found.append(info)
        return found
    if platform == "win32":
        return found
    for pid in psutil.pids():
        try:
            pgid, sid = os.getpgid(pid), os.getsid(pid)
        except (OSError, AttributeError):
            continue
        identity = _psutil_identity(pid)
        if identity is not None:
            found.append(ProcInfo(pid, pgid, sid, identity))
    return found


def process_info(pid: int, platform: str = CURRENT) -> ProcInfo | None:
    """Group, session and identity of one live process (None if gone or a zombie)."""
    if pid <= 0 or platform == "win32":
        return None
    if platform.startswith("linux"):
        return _linux_stat(pid, _linux_boot_id())
    try:
        pgid, sid = os.getpgid(pid), os.getsid(pid)
    except (OSError, AttributeError):
        return None
    identity = _psutil_identity(pid)
    return ProcInfo(pid, pgid, sid, identity) if identity else None


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


def _psutil_identity(pid: int) -> Identity | None:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return Identity(start_time=f"{proc.create_time():.3f}")
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def read_identity(pid: int, platform: str = CURRENT) -> Identity | None:
    if pid <= 0:
        return None
    if platform.startswith("linux"):
        return _linux_identity(pid)
    return _psutil_identity(pid)


def popen_options(platform: str = CURRENT) -> dict[str, Any]:
    """Start the child in its own session (POSIX) or process group (Windows)."""
    if platform == "win32":
        flags = 0x00000200 | 0x08000000  # CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
        return {"creationflags": flags}
    return {"start_new_session": True}


@dataclass
class SignalOps:
    """The OS calls that signal a group; replaced by fakes in unit tests."""

    killpg: Callable[[int, int], None] = getattr(os, "killpg", None)  # type: ignore[assignment]
    kill: Callable[[int, int], None] = os.kill
    kill_tree: Callable[[int], None] | None = None


def _psutil_kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for proc in [*parent.children(recursive=True), parent]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def terminate_group(pid: int, platform: str = CURRENT, ops: SignalOps | None = None) -> None:
    """Ask the child's whole group to stop. A group already gone is not an error."""
    ops = ops or SignalOps()
    try:
        if platform == "win32":
            # CTRL_BREAK reaches every process of the group created with
            # CREATE_NEW_PROCESS_GROUP; a child without a console ignores it and
            # is killed after the grace period.
            ops.kill(pid, getattr(signal, "CTRL_BREAK_EVENT", 1))
        else:
            ops.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError, OSError) as exc:
        log.debug("terminate of group %s: %s", pid, exc)


def kill_group(pid: int, platform: str = CURRENT, ops: SignalOps | None = None) -> None:
    ops = ops or SignalOps()
    try:
        if platform == "win32":
            (ops.kill_tree or _psutil_kill_tree)(pid)
        else:
            ops.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError) as exc:
        log.debug("kill of group %s: %s", pid, exc)


def group_exists(pgid: int, platform: str = CURRENT, ops: SignalOps | None = None) -> bool:
    """Whether a process group we may signal still has a member (zombies count until reaped).

    A group of someone else's (EPERM) counts as not existing: it is not ours to end.
    """
    if platform == "win32" or pgid <= 1:
        return False
    ops = ops or SignalOps()
    try:
        ops.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    except OSError:
        return False
    return True


def group_alive(pgid: int, platform: str = CURRENT, ops: SignalOps | None = None) -> bool:
    """Whether a group we may signal has a member that is not a zombie.

    The kernel keeps a zombie in its group until it is reaped, and an orphan's
    zombie waits for init, which in some containers never reaps. So a group
    that still exists is looked up in the process table (only then: this is
    the rare path) for a live member.
    """
    if not group_exists(pgid, platform, ops):
        return False
    return any(p.pgid == pgid for p in process_table(platform))


def kill_pids(pids: list[int], ops: SignalOps | None = None, sig: int | None = None) -> None:
    """Signal single processes (leftovers already checked to be ours); gone ones are skipped."""
    ops = ops or SignalOps()
    sig = getattr(signal, "SIGKILL", 9) if sig is None else sig
    for pid in pids:
        try:
            ops.kill(pid, sig)
        except (ProcessLookupError, PermissionError, OSError) as exc:
            log.debug("signal %s to %s: %s", sig, pid, exc)


ExitCallback = Callable[[int | None], None]


def spawn(command: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None, stdin: Any,
          stdout: Any, stderr: Any, platform: str = CURRENT, join: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
    """Start a child in a process group (a session on POSIX, a new process group on
    Windows) of its own, with no descriptor of ours but the three given: the one place
    the package starts a process, so a test or another OS sees every start here.

    `join` (Linux): `cgroup.procs` files the child writes itself into between its fork and
    its exec, so its program runs under its caps from its first page. A file that cannot be
    opened is skipped (the caller places the child after the spawn too)."""
    fds = _open_for_join(join)
    try:
        return subprocess.Popen(list(command), env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                                close_fds=True, preexec_fn=_joiner(fds) if fds else None, **popen_options(platform))
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


def kill_and_reap(popen: subprocess.Popen[bytes], platform: str = CURRENT, *, what: str = "child") -> None:
    """Kill a child we just started (and its group) without waiting for it on this thread:
    a daemon thread reaps it, so an event loop that asks never blocks on a slow death."""
    kill_group(popen.pid, platform)

    def reap() -> None:
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("%s %s did not end after a kill", what, popen.pid)

    threading.Thread(target=reap, name=f"reap-{popen.pid}", daemon=True).start()


def end_child(popen: subprocess.Popen[bytes], grace_s: float, platform: str = CURRENT,
              ops: SignalOps | None = None) -> int | None:
    """Stop a child we started and wait for it, blocking: terminate its group, wait up to
    `grace_s`, then kill the group and reap it. Its return code (None if it would not go).

    For a caller with no event loop (doctor's trial start); the orchestrator's stop is the
    same sequence on the loop, for a whole group (`host/local/teardown.py`).
    """
    if popen.poll() is not None:
        return popen.returncode
    terminate_group(popen.pid, platform, ops)
    try:
        return popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill_group(popen.pid, platform, ops)
    try:
        return popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.error("child %s did not end after a kill", popen.pid)
        return None


def watch_exit(
    loop: asyncio.AbstractEventLoop,
    pid: int,
    popen: subprocess.Popen[bytes] | None,
    on_exit: ExitCallback,
) -> Callable[[], None]:
    """Call `on_exit(returncode)` on the loop as soon as `pid` ends; return a canceller.

    Linux: a pidfd in the loop's reader set, which wakes within a millisecond for
    our own children and for re-attached ones alike, with no thread and no
    polling. Elsewhere: one waiting thread per child that posts back to the loop.
    The return code is known only for children this host spawned.
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

    cancel = _watch_pidfd(loop, pid, done, fire)
    if cancel is not None:
        return cancel
    _watch_in_thread(loop, pid, popen, done, fire)
    return done.set


def _watch_pidfd(loop: asyncio.AbstractEventLoop, pid: int, done: threading.Event,
                 fire: Callable[[], None]) -> Callable[[], None] | None:
    """Watch through a pidfd in the loop's reader set; None where there is none (not Linux, an old kernel)."""
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
