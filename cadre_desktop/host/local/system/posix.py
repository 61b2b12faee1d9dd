"""macOS and any POSIX but Linux: the process seam (`seam.ProcessOS`) through sessions and psutil.

Each child leads a session of its own, so its process group (whose id is its pid)
survives the host and is signalled whole: SIGTERM, a grace period, SIGKILL.
Identities and the process table come from psutil (start times in seconds), an exit
is watched by one waiting thread per child, and caps are priority only (nice 10).
`LinuxOS` (`linux.py`) builds on this class.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.procs import ExitCallback, GroupEnding, Identity, Job, NoAdoption, ProcInfo, SignalOps, Stream


class PosixOS(GroupEnding, NoAdoption):
    """The process calls of a POSIX system without Linux's extras (macOS, the BSDs)."""

    groups = True
    warm_starts = True
    log_keeper = True
    caps_ways: tuple[str, ...] = ()

    def __init__(self, signals: SignalOps | None = None) -> None:
        self.signals = signals or SignalOps()

    # -- starting and watching ---------------------------------------------------------
    def spawn(self, command: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None, stdin: procs.Stream,
              stdout: Stream, stderr: Stream, join: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
        return procs.spawn(command, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, join=join)

    def read_identity(self, pid: int) -> Identity | None:
        return procs.psutil_identity(pid)

    def process_info(self, pid: int) -> ProcInfo | None:
        return procs.psutil_info(pid) if pid > 0 else None

    def process_table(self) -> list[ProcInfo]:
        found = []
        for pid in psutil.pids():
            info = procs.psutil_info(pid)
            if info is not None:
                found.append(info)
        return found

    def watch_exit(self, loop: asyncio.AbstractEventLoop, pid: int, popen: subprocess.Popen[bytes] | None,
                   on_exit: ExitCallback) -> Callable[[], None]:
        return procs.watch_exit(loop, pid, popen, on_exit)

    # -- ending ---------------------------------------------------------------------------
    def signal_group(self, pid: int, job: object | None, *, kill: bool) -> None:
        if kill:
            self.kill_group(pid)
        else:
            procs.signal_quietly(self.signals.killpg, pid, signal.SIGTERM, "terminate of group")

    def end_group_now(self, pgid: int | None, job: object | None) -> bool:
        if not pgid or not self.group_alive(pgid):
            return False
        self.kill_group(pgid)
        return True

    def kill_group(self, pid: int) -> None:
        procs.signal_quietly(self.signals.killpg, pid, procs.SIGKILL, "kill of group")

    def group_exists(self, pgid: int) -> bool:
        """A group of someone else's (EPERM) counts as not existing: it is not ours to end."""
        if pgid <= 1:
            return False
        try:
            self.signals.killpg(pgid, 0)
        except OSError:
            return False
        return True

    def group_alive(self, pgid: int) -> bool:
        """The kernel keeps a zombie in its group until it is reaped, and an orphan's zombie
        waits for init, which in some containers never reaps. So a group that still exists is
        looked up in the process table (only then: this is the rare path) for a live member."""
        if not self.group_exists(pgid):
            return False
        return any(p.pgid == pgid for p in self.process_table())

    def lock_pids(self, st: os.stat_result) -> list[int] | None:
        return []

    # -- jobs, caps and priority: no jobs here ----------------------------------------------
    def new_job(self, handle_id: str) -> Job | None:
        return None

    def assign_job(self, job: Job | None, popen: subprocess.Popen[bytes]) -> Job | None:
        return None

    def reopen_job(self, name: str | None) -> object | None:
        return None

    def end_job(self, job: object | None) -> bool:
        return False

    def close_job(self, job: object | None) -> None:
        return None

    def limit_job(self, job: object | None, *, memory_mb: int | None, cpu_percent: int | None,
                  low_priority: bool) -> bool:
        return False

    def job_hit_memory_limit(self, job: object | None) -> bool:
        return False

    def lower_priority(self, pid: int) -> None:
        os.setpriority(os.PRIO_PROCESS, pid, 10)
