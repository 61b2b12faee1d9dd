"""Windows: one Job object per node child, so whatever the node starts ends with it.

Windows has no process groups that survive their leader the way POSIX ones
do; a Job object is the equivalent. Each child is assigned to a job of its own,
named after its handle (`Local\\cadre-desktop-<handle id>`), created with
KILL_ON_JOB_CLOSE: when the last handle to the job closes, every process in it
is killed.

The host must not be that last handle, or its death would take every node
with it (a node outlives its host: `keep_nodes_running_on_quit`, a crash).
The node's log pump (see `cadre_desktop.logs.logpump`) opens the job by name and
holds it for as long as the node writes output, which is as long as the node
lives. So the job closes, and kills what is left, when the node's output ends
or its pump is killed; and a restarted host opens the job again by its name,
kept in state.json, to end the node's whole tree on stop, give-up or remove.

Every call goes through `JobOps`, which unit tests replace with a fake, so
this branch is exercised on Linux; `windows.WindowsOS` is what calls it. A job is
the OS's handle, opaque here (`object`).
"""

from __future__ import annotations

import ctypes
import logging
from typing import Protocol, cast

log = logging.getLogger(__name__)

JOB_OBJECT_ASSIGN_PROCESS = 0x0001
JOB_OBJECT_SET_ATTRIBUTES = 0x0002
JOB_OBJECT_QUERY = 0x0004
JOB_OBJECT_TERMINATE = 0x0008
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9
#: A node's caps (see `caps`): the job's memory, its priority class, its share of the CPUs.
JOB_OBJECT_LIMIT_PRIORITY_CLASS = 0x0020
JOB_OBJECT_LIMIT_JOB_MEMORY = 0x0200
BELOW_NORMAL_PRIORITY_CLASS = 0x4000
JOB_OBJECT_CPU_RATE_CONTROL_INFORMATION_CLASS = 15
JOB_OBJECT_CPU_RATE_CONTROL_ENABLE = 0x1
JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP = 0x4
#: The exit code the processes of a terminated job get.
TERMINATED_EXIT_CODE = 1


class _BasicLimits(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class CpuRateControl(ctypes.Structure):
    #: CpuRate: the job's share of every CPU of the computer, in hundredths of a percent.
    _fields_ = [("ControlFlags", ctypes.c_uint32), ("CpuRate", ctypes.c_uint32)]


class _IoCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
        "ReadTransferCount", "WriteTransferCount", "OtherTransferCount")]


class ExtendedLimits(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", _BasicLimits),
        ("IoInfo", _IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


def _last_error() -> int:
    return int(getattr(ctypes, "get_last_error", lambda: 0)())


class Kernel32(Protocol):
    """The kernel32 functions this module calls, as ctypes gives them (a fake in tests)."""

    def CreateJobObjectW(self, attributes: None, name: str, /) -> object: ...  # noqa: N802

    def SetInformationJobObject(self, job: object, info_class: int, info: object, size: int, /) -> int: ...  # noqa: N802

    def QueryInformationJobObject(self, job: object, info_class: int, info: object, size: int,  # noqa: N802
                                  returned: None, /) -> int: ...

    def AssignProcessToJobObject(self, job: object, process: object, /) -> int: ...  # noqa: N802

    def OpenJobObjectW(self, access: int, inherit: bool, name: str, /) -> object: ...  # noqa: N802

    def TerminateJobObject(self, job: object, code: int, /) -> int: ...  # noqa: N802

    def CloseHandle(self, handle: object, /) -> int: ...  # noqa: N802


class JobOps:
    """The kernel32 calls this module makes (real ones only on Windows)."""

    def __init__(self, kernel32: object | None = None) -> None:
        """`kernel32`: a test's fake of the functions it uses (else Windows' own, loaded here)."""
        if kernel32 is None:
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        self.k = cast(Kernel32, kernel32)

    def create(self, name: str) -> object:
        handle = self.k.CreateJobObjectW(None, name)
        if not handle:
            raise OSError(_last_error(), f"CreateJobObjectW({name}) failed")
        return handle

    def kill_on_close(self, job: object) -> None:
        info = ExtendedLimits()
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        if not self.k.SetInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
                                              ctypes.byref(info), ctypes.sizeof(info)):
            raise OSError(_last_error(), "SetInformationJobObject failed")

    def set_limits(self, job: object, *, memory_bytes: int | None, priority_class: int | None) -> None:
        """The job's limits again, kill-on-close kept (the call replaces every flag)."""
        info = ExtendedLimits()
        flags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        if memory_bytes:
            flags |= JOB_OBJECT_LIMIT_JOB_MEMORY
            info.JobMemoryLimit = memory_bytes
        if priority_class:
            flags |= JOB_OBJECT_LIMIT_PRIORITY_CLASS
            info.BasicLimitInformation.PriorityClass = priority_class
        info.BasicLimitInformation.LimitFlags = flags
        if not self.k.SetInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
                                              ctypes.byref(info), ctypes.sizeof(info)):
            raise OSError(_last_error(), "SetInformationJobObject failed")

    def set_cpu_rate(self, job: object, rate: int) -> None:
        info = CpuRateControl(JOB_OBJECT_CPU_RATE_CONTROL_ENABLE | JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP, rate)
        if not self.k.SetInformationJobObject(job, JOB_OBJECT_CPU_RATE_CONTROL_INFORMATION_CLASS,
                                              ctypes.byref(info), ctypes.sizeof(info)):
            raise OSError(_last_error(), "SetInformationJobObject (CPU rate) failed")

    def memory_use(self, job: object) -> tuple[int, int]:
        """The job's peak memory and its memory limit, in bytes (0: no limit)."""
        info = ExtendedLimits()
        if not self.k.QueryInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
                                                ctypes.byref(info), ctypes.sizeof(info), None):
            raise OSError(_last_error(), "QueryInformationJobObject failed")
        limited = info.BasicLimitInformation.LimitFlags & JOB_OBJECT_LIMIT_JOB_MEMORY
        return int(info.PeakJobMemoryUsed), int(info.JobMemoryLimit) if limited else 0

    def assign(self, job: object, process_handle: object) -> None:
        if not self.k.AssignProcessToJobObject(job, process_handle):
            raise OSError(_last_error(), "AssignProcessToJobObject failed")

    def open(self, name: str) -> object | None:
        handle = self.k.OpenJobObjectW(JOB_OBJECT_TERMINATE | JOB_OBJECT_QUERY, False, name)
        return handle or None

    def terminate(self, job: object) -> None:
        self.k.TerminateJobObject(job, TERMINATED_EXIT_CODE)

    def close(self, job: object) -> None:
        self.k.CloseHandle(job)


def job_name(handle_id: str) -> str:
    return f"Local\\cadre-desktop-{handle_id}"


def prepare(ops: JobOps, name: str) -> object | None:
    """A new kill-on-close job for a child about to start, or None (logged) if Windows refuses.

    Without a job the child still runs; stopping it falls back to killing its
    process tree, as before jobs existed.
    """
    job = None
    try:
        job = ops.create(name)
        ops.kill_on_close(job)
        return job
    except OSError as exc:
        log.warning("could not create Job object %s: %s", name, exc)
        if job:
            ops.close(job)
        return None


def assign(ops: JobOps, job: object | None, process_handle: object) -> object | None:
    """Put the just-started child into its job; the job, or None (closed) on failure."""
    if not job:
        return None
    try:
        ops.assign(job, process_handle)
        return job
    except OSError as exc:
        log.warning("could not put the child into its Job object: %s", exc)
        ops.close(job)
        return None


def reopen(ops: JobOps, name: str | None) -> object | None:
    """The job of a child an earlier host started (its pump keeps it open), or None."""
    if not name:
        return None
    try:
        return ops.open(name)
    except OSError:
        return None


def end(ops: JobOps, job: object | None) -> bool:
    """Kill every process in the job; False when there is no job to end."""
    if not job:
        return False
    try:
        ops.terminate(job)
        return True
    except OSError as exc:
        log.debug("TerminateJobObject failed: %s", exc)
        return False


def cpu_rate(cpu_percent: int, cores: int) -> int:
    """A cap in percent of one core as a job's CPU rate: hundredths of a percent of all the
    computer's CPUs (50 % of one core on 4 cores: 1250), at least 1, at most 10000."""
    return max(1, min(10_000, cpu_percent * 100 // max(1, cores)))


def limit(ops: JobOps, job: object | None, *, memory_mb: int | None, cpu_percent: int | None,
          low_priority: bool, cores: int) -> bool:
    """Hold the node's job to its caps; False (logged) when there is no job or Windows refused."""
    if not job:
        return False
    try:
        ops.set_limits(job, memory_bytes=memory_mb << 20 if memory_mb else None,
                       priority_class=BELOW_NORMAL_PRIORITY_CLASS if low_priority else None)
        if cpu_percent:
            ops.set_cpu_rate(job, cpu_rate(cpu_percent, cores))
        return True
    except OSError as exc:
        log.warning("could not set the Job object's limits: %s", exc)
        return False


def hit_memory_limit(ops: JobOps, job: object | None) -> bool:
    """Whether the job's processes reached its memory limit. Windows does not kill there: an
    allocation past it fails, and a node dies of that (so within a tenth of the limit, or 1 MiB,
    counts: the allocation that failed was not made)."""
    if not job:
        return False
    try:
        peak, limit = ops.memory_use(job)
    except OSError as exc:
        log.debug("QueryInformationJobObject failed: %s", exc)
        return False
    return limit > 0 and peak >= limit - max(limit // 10, 1 << 20)
