"""Fakes of the caps' OS seams: a cgroup tree in memory, a systemd user manager, job calls, priorities."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from cadre_desktop.host.local.limits.cgroups import CgroupOps
from cadre_desktop.host.local.limits.scope import ScopeOps
from cadre_desktop.host.local.system.linux import LinuxOS
from cadre_desktop.host.local.system.posix import PosixOS
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.host.local.system.windows import WindowsOS

V1_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_OWN = "4:memory:/sandbox/me\n1:cpu:/\n0::/\n"

V2_MOUNTINFO = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V2_OWN = "0::/user.slice/app.slice/me\n"


class FakeCgroupOps(CgroupOps):
    """A cgroup tree in memory: directories, files, and a kernel that refuses rmdir of a busy group."""

    def __init__(self, mountinfo: str, own: str, dirs: list[str], files: dict[str, str] | None = None,
                 read_only: tuple[str, ...] = ()) -> None:
        self._mountinfo, self._own = mountinfo, own
        self.dirs = {Path(d) for d in dirs}
        self.files = {Path(k): v for k, v in (files or {}).items()}
        self.read_only = {Path(p) for p in read_only}
        self.writes: list[tuple[str, str]] = []
        self.busy: set[Path] = set()

    def read(self, path: Path) -> str:
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        return self.files[path]

    def write(self, path: Path, text: str) -> None:
        if path.parent not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        self.writes.append((str(path), text))
        self.files[path] = text

    def mkdir(self, path: Path) -> None:
        if path.parent not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
        self.dirs.add(path)

    def rmdir(self, path: Path) -> None:
        if path not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
        if path in self.busy or any(d.parent == path for d in self.dirs):
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        self.dirs.discard(path)
        for f in [f for f in self.files if f.parent == path]:
            del self.files[f]

    def is_dir(self, path: Path) -> bool:
        return path in self.dirs

    def children(self, path: Path) -> list[Path]:
        return sorted(d for d in self.dirs if d.parent == path)

    def writable(self, path: Path) -> bool:
        return path in self.dirs and path not in self.read_only

    def own_cgroups(self) -> str:
        return self._own

    def mountinfo(self) -> str:
        return self._mountinfo


def v1_tree(**options: Any) -> FakeCgroupOps:
    return FakeCgroupOps(V1_MOUNTINFO, V1_OWN, ["/sys/fs/cgroup/memory/sandbox/me", "/sys/fs/cgroup/cpu",
                                                "/sys/fs/cgroup/unified"], **options)


def v2_tree(subtree_control: str = "cpu memory pids", **options: Any) -> FakeCgroupOps:
    me = "/sys/fs/cgroup/user.slice/app.slice/me"
    return FakeCgroupOps(V2_MOUNTINFO, V2_OWN, [me], {f"{me}/cgroup.subtree_control": subtree_control}, **options)


class FakeScopeOps(ScopeOps):
    """A systemd user manager: the scopes started and stopped."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__("unix:path=/nonexistent")
        self.started: list[tuple[str, list[tuple[str, str, Any]]]] = []
        self.stopped: list[str] = []
        self.fail = fail

    async def start(self, unit: str, props: list[tuple[str, str, Any]]) -> None:
        if self.fail:
            raise OSError("org.freedesktop.DBus.Error.AccessDenied")
        self.started.append((unit, props))

    async def stop(self, unit: str) -> None:
        self.stopped.append(unit)


class FakeJobOps:
    """winjob.JobOps's limit calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def set_limits(self, job: Any, *, memory_bytes: int | None, priority_class: int | None) -> None:
        self.calls.append(("limits", job, memory_bytes, priority_class))

    def set_cpu_rate(self, job: Any, rate: int) -> None:
        self.calls.append(("cpu_rate", job, rate))

    #: What memory_use answers: the job's peak and its limit.
    use: tuple[int, int] = (0, 0)

    def memory_use(self, job: Any) -> tuple[int, int]:
        return self.use


class FakeKernel32:
    """kernel32's SetInformationJobObject, recording the structures it is given."""

    def __init__(self) -> None:
        self.infos: list[tuple[int, Any]] = []

    def SetInformationJobObject(self, job: Any, info_class: int, info: Any, size: int) -> int:  # noqa: N802
        self.infos.append((info_class, info._obj))
        return 1

    def QueryInformationJobObject(self, job: Any, info_class: int, info: Any, size: int, _ret: Any) -> int:  # noqa: N802
        """Answers the last extended limits set, with a peak of 250 MiB."""
        limits = next(i for c, i in reversed(self.infos) if c == info_class)
        info._obj.BasicLimitInformation.LimitFlags = limits.BasicLimitInformation.LimitFlags
        info._obj.JobMemoryLimit = limits.JobMemoryLimit
        info._obj.PeakJobMemoryUsed = 250 << 20
        return 1


class FakePriority:
    def __init__(self, cores: int = 2) -> None:
        self.lowered: list[int] = []
        self._cores = cores

    def lower(self, pid: int) -> None:
        self.lowered.append(pid)

    def cores(self) -> int:
        return self._cores


class FakeChild:
    def __init__(self, node_id: str = "n1", pid: int = 4242, handle_id: str | None = None, job: Any = None) -> None:
        self.id = handle_id or f"{node_id}.h{pid}"
        self.node_id = node_id
        self.pid = pid
        self._job_handle = job


def recording_os(platform: str, priority: FakePriority, jobs: FakeJobOps | None = None) -> ProcessOS:
    """One platform's OS seam ("linux", "darwin", "win32") whose priority calls `priority` records
    (and whose job calls `jobs` answers, on Windows): the rest is the platform's own."""
    if platform == "win32":
        class RecordingWindows(WindowsOS):
            def lower_priority(self, pid: int) -> None:
                priority.lower(pid)
        return RecordingWindows(job_ops=lambda: jobs, cores=priority.cores)  # type: ignore[arg-type, return-value]
    base: type[PosixOS] = LinuxOS if platform == "linux" else PosixOS

    class Recording(base):  # type: ignore[valid-type, misc]
        def lower_priority(self, pid: int) -> None:
            priority.lower(pid)
    return Recording()
