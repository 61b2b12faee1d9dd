"""The local driver's one OS seam: every call it makes on a process, one class per platform.

`ProcessOS` is the whole of it: how a child is started in a group (or Job object) of its
own, how its identity is read, how its exit is watched, how its group is terminated,
killed and reaped, where its caps go (a cgroup, a job, a priority), and how the host
adopts the nodes a fork server makes (a subreaper, their reaping). `LinuxOS`
(`linux.py`), `PosixOS` (macOS and other POSIX, `posix.py`) and `WindowsOS`
(`windows.py`) are the three; `for_this_os` picks one, once, where the driver is made
(`host/drivers.py`), and it is handed down as a typed constructor parameter. Nothing
else in `host/local` asks which OS it runs on; unit tests fake the seam whole
(`tests/support/fake_os.py`) or run a platform's class with fake OS calls.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from cadre_desktop.host.local.system.procs import ExitCallback, Identity, Job, ProcInfo, Stream


class ProcessOS(Protocol):
    """Every OS call the local driver makes on a process."""

    #: Children lead a POSIX process group (and session) of their own, whose id is their pid.
    groups: bool
    #: A standby may be kept loaded (its stdin a socket pair), a warm start handed to it.
    warm_starts: bool
    #: One log keeper process writes every node's log (descriptors passed over a unix socket);
    #: else each node gets a log pump of its own (which holds its Job object).
    log_keeper: bool
    #: The ways this OS may hold a node to its caps, best first: "systemd", "cgroup", "job" (none: priority only).
    caps_ways: tuple[str, ...]

    # -- starting and watching ---------------------------------------------------------
    def spawn(self, command: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None, stdin: Stream,
              stdout: Stream, stderr: Stream, join: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
        """Start a child in a group of its own (`procs.spawn`); `join`: cgroup files it joins before its exec."""
        ...

    def read_identity(self, pid: int) -> Identity | None:
        """Who `pid` is now (None: gone, or a zombie)."""
        ...

    def process_info(self, pid: int) -> ProcInfo | None: ...

    def process_table(self) -> list[ProcInfo]:
        """Every live process with its group and session (Windows: its parent stands in for both)."""
        ...

    def watch_exit(self, loop: asyncio.AbstractEventLoop, pid: int, popen: subprocess.Popen[bytes] | None,
                   on_exit: ExitCallback) -> Callable[[], None]:
        """Call `on_exit(returncode)` on the loop as soon as `pid` ends; a canceller."""
        ...

    # -- ending ---------------------------------------------------------------------------
    def signal_group(self, pid: int, job: object | None, *, kill: bool) -> None:
        """Terminate (or kill) a child's whole group, or end its job; call only while it is ours."""
        ...

    def end_group_now(self, pgid: int | None, job: object | None) -> bool:
        """A leader died on its own: kill what it left in its group or job at once; True when a
        live group was found (for the caller to say), False when nothing was left or there are no groups."""
        ...

    def group_alive(self, pgid: int) -> bool:
        """Whether a group we may signal has a member that is not a zombie."""
        ...

    def group_exists(self, pgid: int) -> bool:
        """Whether a group we may signal still has a member (zombies count until reaped)."""
        ...

    def kill_group(self, pid: int) -> None: ...

    def kill_pids(self, pids: Sequence[int]) -> None:
        """Kill single processes already checked to be ours; gone ones are skipped."""
        ...

    def kill_and_reap(self, popen: subprocess.Popen[bytes], *, what: str = "child") -> None:
        """Kill a child we just started (and its group), reaped off this thread."""
        ...

    def end_child(self, popen: subprocess.Popen[bytes], grace_s: float) -> int | None:
        """Terminate, wait up to `grace_s`, kill: blocking, for a caller with no loop (doctor's trial start)."""
        ...

    def lock_pids(self, st: os.stat_result) -> list[int] | None:
        """Pids the OS names as holding a lock on this file (Linux's /proc/locks; [] elsewhere);
        None where a work folder's lock is no flock (Windows)."""
        ...

    # -- jobs, caps and priority --------------------------------------------------------------
    def new_job(self, handle_id: str) -> Job | None:
        """A kill-on-close Job object for a child about to start (Windows; None elsewhere or refused)."""
        ...

    def assign_job(self, job: Job | None, popen: subprocess.Popen[bytes]) -> Job | None: ...

    def reopen_job(self, name: str | None) -> object | None:
        """The job of a child an earlier host started, by its name; None: none."""
        ...

    def end_job(self, job: object | None) -> bool:
        """Kill every process of the job; False when there is no job to end."""
        ...

    def close_job(self, job: object | None) -> None: ...

    def limit_job(self, job: object | None, *, memory_mb: int | None, cpu_percent: int | None,
                  low_priority: bool) -> bool:
        """Hold a job to its caps; False when there is no job or the OS refused."""
        ...

    def job_hit_memory_limit(self, job: object | None) -> bool: ...

    def lower_priority(self, pid: int) -> None:
        """The OS's background priority for a child (nice 10; below normal on Windows)."""
        ...

    # -- a fork server's children ---------------------------------------------------------------
    def can_adopt(self) -> bool:
        """Whether nodes a fork server makes can be held here as children (Linux with pidfds)."""
        ...

    def become_subreaper(self) -> bool:
        """Make this process the parent of any orphan below it; True if it is (Linux, once)."""
        ...

    def subreaping(self) -> bool: ...

    def fork_mark(self) -> int | None:
        """Now, as the process table dates a process's start (Linux: clock ticks since boot),
        taken before a fork request for `not_forked`; None where unknown."""
        ...

    def not_forked(self, pid: int, server_pid: int, since: int | None) -> str | None:
        """Why the `pid` a fork server named cannot be the node it made for us after `since`
        (None: it is this host's own new child, so `adopt` may take it); in words."""
        ...

    def adopt(self, pid: int, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """A node a fork server made (proven by `not_forked` first), orphaned to us, as a child: pid, exit code, reaping."""
        ...

    def reap_stale(self, seen: set[int]) -> tuple[list[int], set[int]]:
        """Reap the orphans' zombies that were zombies at the last look (`seen`) already;
        those reaped, and the zombies to remember for the next look."""
        ...


def for_this_os() -> ProcessOS:
    """The seam of the OS this runs on: chosen here, once per driver."""
    if sys.platform == "win32":
        from cadre_desktop.host.local.system.windows import WindowsOS

        return WindowsOS()
    if sys.platform.startswith("linux"):
        from cadre_desktop.host.local.system.linux import LinuxOS

        return LinuxOS()
    from cadre_desktop.host.local.system.posix import PosixOS

    return PosixOS()
