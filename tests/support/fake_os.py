"""The local driver's OS seam faked whole (`system/seam.py:ProcessOS`): every call recorded,
nothing sent to any process. Capabilities and answers are set by the test."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from cadre_desktop.host.local.system.procs import ExitCallback, Identity, Job, NoAdoption, ProcInfo, Stream


class FakeOS(NoAdoption):
    """A ProcessOS that records each call as (name, *arguments)."""

    def __init__(self, *, groups: bool = True, alive: set[int] | None = None) -> None:
        self.groups = groups
        self.warm_starts = groups
        self.log_keeper = groups
        self.caps_ways: tuple[str, ...] = ()
        self.calls: list[tuple[object, ...]] = []
        #: The groups that still have a live member; the identities of live pids.
        self.alive: set[int] = set() if alive is None else alive
        self.identities: dict[int, Identity] = {}
        self.table: list[ProcInfo] = []

    def _note(self, *call: object) -> None:
        self.calls.append(call)

    def spawn(self, command: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None, stdin: Stream,
              stdout: Stream, stderr: Stream, join: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
        self._note("spawn", list(command))
        raise OSError("the fake OS starts nothing")

    def read_identity(self, pid: int) -> Identity | None:
        return self.identities.get(pid)

    def process_info(self, pid: int) -> ProcInfo | None:
        return next((p for p in self.table if p.pid == pid), None)

    def process_table(self) -> list[ProcInfo]:
        return list(self.table)

    def watch_exit(self, loop: asyncio.AbstractEventLoop, pid: int, popen: subprocess.Popen[bytes] | None,
                   on_exit: ExitCallback) -> Callable[[], None]:
        self._note("watch_exit", pid)
        return lambda: None

    def signal_group(self, pid: int, job: object | None, *, kill: bool) -> None:
        self._note("signal_group", pid, job, kill)
        if kill:
            self.alive.discard(pid)

    def end_group_now(self, pgid: int | None, job: object | None) -> bool:
        self._note("end_group_now", pgid, job)
        if pgid in self.alive:
            self.alive.discard(pgid)
            return True
        return False

    def group_alive(self, pgid: int) -> bool:
        return pgid in self.alive

    def group_exists(self, pgid: int) -> bool:
        return pgid in self.alive

    def kill_group(self, pid: int) -> None:
        self._note("kill_group", pid)
        self.alive.discard(pid)

    def kill_pids(self, pids: Sequence[int]) -> None:
        self._note("kill_pids", list(pids))

    def kill_and_reap(self, popen: subprocess.Popen[bytes], *, what: str = "child") -> None:
        self._note("kill_and_reap", popen.pid, what)

    def end_child(self, popen: subprocess.Popen[bytes], grace_s: float) -> int | None:
        self._note("end_child", popen.pid, grace_s)
        return None

    def lock_pids(self, st: os.stat_result) -> list[int] | None:
        return [pid for pid in self.alive if pid == st.st_ino]  # none, but for a test that plants one

    def new_job(self, handle_id: str) -> Job | None:
        self._note("new_job", handle_id)
        return Job(f"Local\\fake-{handle_id}", handle_id) if not self.groups else None

    def assign_job(self, job: Job | None, popen: subprocess.Popen[bytes]) -> Job | None:
        self._note("assign_job", job, popen.pid)
        return job

    def reopen_job(self, name: str | None) -> object | None:
        self._note("reopen_job", name)
        return name

    def end_job(self, job: object | None) -> bool:
        self._note("end_job", job)
        return job is not None

    def close_job(self, job: object | None) -> None:
        self._note("close_job", job)

    def limit_job(self, job: object | None, *, memory_mb: int | None, cpu_percent: int | None,
                  low_priority: bool) -> bool:
        self._note("limit_job", job, memory_mb, cpu_percent, low_priority)
        return False

    def job_hit_memory_limit(self, job: object | None) -> bool:
        return False

    def lower_priority(self, pid: int) -> None:
        self._note("lower_priority", pid)
