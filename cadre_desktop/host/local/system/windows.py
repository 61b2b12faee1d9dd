"""Windows: the process seam (`seam.ProcessOS`) through process groups, Job objects and psutil.

Each child starts in a new process group with no console window; it gets a
kill-on-close Job object of its own (`winjob`), which its log pump holds, so
whatever the node starts ends with it. A stop sends CTRL_BREAK to the group, then
ends the job (or, with none, kills the process tree). There are no POSIX groups:
the process table stands a process's parent in for its group. Caps are the job's
limits; low priority is the below-normal class. Every kernel32 call goes through
`winjob.JobOps`, which unit tests replace, so this class runs on Linux in tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from cadre_desktop.host.local.system import procs, winjob
from cadre_desktop.host.local.system.procs import ExitCallback, GroupEnding, Identity, Job, NoAdoption, ProcInfo, SignalOps, Stream

log = logging.getLogger(__name__)

CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_NO_WINDOW = 0x08000000


def kill_tree(pid: int) -> None:
    """Kill a process and everything below it (a child without a job)."""
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for proc in [*parent.children(recursive=True), parent]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


class WindowsOS(GroupEnding, NoAdoption):
    """The process calls of Windows."""

    groups = False
    warm_starts = False
    log_keeper = False
    caps_ways: tuple[str, ...] = ("job",)

    def __init__(self, signals: SignalOps | None = None, job_ops: Callable[[], winjob.JobOps] | None = None,
                 tree_kill: Callable[[int], None] = kill_tree, cores: Callable[[], int] | None = None) -> None:
        self.signals = signals or SignalOps()
        self._job_ops_factory = job_ops or winjob.JobOps
        self._job_ops: winjob.JobOps | None = None
        self.tree_kill = tree_kill
        self.cores = cores or (lambda: os.cpu_count() or 1)

    def jobs(self) -> winjob.JobOps:
        """kernel32's job calls, loaded at their first use."""
        if self._job_ops is None:
            self._job_ops = self._job_ops_factory()
        return self._job_ops

    # -- starting and watching ---------------------------------------------------------
    def spawn(self, command: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None, stdin: Stream,
              stdout: Stream, stderr: Stream, join: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
        return procs.spawn(command, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                           creationflags=CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW)

    def read_identity(self, pid: int) -> Identity | None:
        return procs.psutil_identity(pid)

    def process_info(self, pid: int) -> ProcInfo | None:
        return None

    def process_table(self) -> list[ProcInfo]:
        """Windows has no groups: the parent pid stands in for both, so no process looks like a leader."""
        found = []
        for proc in psutil.process_iter(["pid", "ppid", "create_time"]):
            info = proc.info
            if info.get("create_time") is None:
                continue
            ident = Identity(f"{info['create_time']:.3f}")
            found.append(ProcInfo(info["pid"], info.get("ppid") or 0, info.get("ppid") or 0, ident))
        return found

    def watch_exit(self, loop: asyncio.AbstractEventLoop, pid: int, popen: subprocess.Popen[bytes] | None,
                   on_exit: ExitCallback) -> Callable[[], None]:
        return procs.watch_exit(loop, pid, popen, on_exit)

    # -- ending ---------------------------------------------------------------------------
    def signal_group(self, pid: int, job: object | None, *, kill: bool) -> None:
        """CTRL_BREAK reaches every process of the group created with CREATE_NEW_PROCESS_GROUP;
        a child without a console ignores it and is killed after the grace period: its job
        ended, or its process tree where it has none."""
        if not kill:
            procs.signal_quietly(self.signals.kill, pid, getattr(signal, "CTRL_BREAK_EVENT", 1), "terminate of group")
        elif not self.end_job(job):
            self.kill_group(pid)

    def end_group_now(self, pgid: int | None, job: object | None) -> bool:
        self.end_job(job)
        return False

    def kill_group(self, pid: int) -> None:
        try:
            self.tree_kill(pid)
        except OSError as exc:
            log.debug("kill of group %s: %s", pid, exc)

    def group_exists(self, pgid: int) -> bool:
        return False

    def group_alive(self, pgid: int) -> bool:
        return False

    def lock_pids(self, st: os.stat_result) -> list[int] | None:
        return None

    # -- jobs, caps and priority ----------------------------------------------------------------
    def new_job(self, handle_id: str) -> Job | None:
        name = winjob.job_name(handle_id)
        native = winjob.prepare(self.jobs(), name)
        return Job(name, native) if native is not None else None

    def assign_job(self, job: Job | None, popen: subprocess.Popen[bytes]) -> Job | None:
        if job is None:
            return None
        native = winjob.assign(self.jobs(), job.native, getattr(popen, "_handle", None))
        return Job(job.name, native) if native is not None else None

    def reopen_job(self, name: str | None) -> object | None:
        return winjob.reopen(self.jobs(), name)

    def end_job(self, job: object | None) -> bool:
        return winjob.end(self.jobs(), job) if job else False

    def close_job(self, job: object | None) -> None:
        if job is not None:
            self.jobs().close(job)

    def limit_job(self, job: object | None, *, memory_mb: int | None, cpu_percent: int | None,
                  low_priority: bool) -> bool:
        return winjob.limit(self.jobs(), job, memory_mb=memory_mb, cpu_percent=cpu_percent,
                            low_priority=low_priority, cores=self.cores())

    def job_hit_memory_limit(self, job: object | None) -> bool:
        return winjob.hit_memory_limit(self.jobs(), job)

    def lower_priority(self, pid: int) -> None:
        psutil.Process(pid).nice(getattr(psutil, "BELOW_NORMAL_PRIORITY_CLASS", winjob.BELOW_NORMAL_PRIORITY_CLASS))
