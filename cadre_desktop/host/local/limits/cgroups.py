"""Linux: one cgroup per node, in a part of the cgroup tree this host may write.

Two shapes are used, whichever this computer allows (`caps.choose` asks the
systemd user manager first, see `scope`):

* **cgroup v2**: the host's own cgroup (from /proc/self/cgroup) when it is
  writable and already hands the `memory` and `cpu` controllers to its children
  (a delegated subtree): `cadre-desktop-<home id>/<node id>` under it, with
  `memory.max` and `cpu.max`. v2 lets a cgroup with processes of its own hand
  controllers down only at the root, so in practice this is a host running as
  root in the root cgroup; the host never moves itself into a leaf to make a
  subtree (a desktop has the systemd user manager for that).
* **cgroup v1**: the `memory` and `cpu` hierarchies, each where this host's own
  cgroup is in it, when writable (as root in a container, or delegated):
  `cadre-desktop-<home id>/<node id>` under each, with `memory.limit_in_bytes`,
  and `cpu.cfs_quota_us` over `cpu.cfs_period_us`.

A node's group is made (or re-used) at each start and its limits written from
the caps of that start before its child is started (`prepare`); the child joins
it itself, between its fork and its exec (`procs.spawn`'s `join`), so not a page
it touches is charged outside its cap (v1 and v2 leave a page charged where it was
first touched: a child moved in after its spawn could hold its cap plus what it
allocated meanwhile, 72 MiB under a 64 MiB cap on a busy machine). Its pid is
written to `cgroup.procs` again after the spawn (a standby handed over, a join
the child could not make), so everything it starts is held too. Remove deletes the node's group,
and Quit (stopping the nodes) the whole `cadre-desktop-<home id>` tree: nothing
is left behind. A kill by the memory cap is read from the group's counters
(`memory.oom_control`'s `oom_kill` on v1, `memory.events`' on v2).

Every call goes through `CgroupOps`, which unit tests replace with a fake tree.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cadre_desktop.host.core.driver import NodeCaps

log = logging.getLogger(__name__)

#: The scheduler period a CPU cap is a share of (100 ms, the kernel's default).
CPU_PERIOD_US = 100_000


class CgroupOps:
    """The file calls on the cgroup tree (and the two /proc files that locate it)."""

    def read(self, path: Path) -> str:
        return path.read_text(encoding="ascii", errors="replace")

    def write(self, path: Path, text: str) -> None:
        # No temp file and rename: a cgroup file takes one write of the whole value.
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode("ascii"))
        finally:
            os.close(fd)

    def mkdir(self, path: Path) -> None:
        path.mkdir(exist_ok=True)

    def rmdir(self, path: Path) -> None:
        path.rmdir()

    def is_dir(self, path: Path) -> bool:
        return path.is_dir()

    def children(self, path: Path) -> list[Path]:
        try:
            return [p for p in path.iterdir() if p.is_dir()]
        except OSError:
            return []

    def writable(self, path: Path) -> bool:
        return os.access(path, os.W_OK | os.X_OK)

    def own_cgroups(self) -> str:
        return self.read(Path("/proc/self/cgroup"))

    def mountinfo(self) -> str:
        return self.read(Path("/proc/self/mountinfo"))


@dataclass(frozen=True)
class Mount:
    fstype: str
    point: Path
    #: The part of the hierarchy mounted there (usually "/").
    root: str
    options: frozenset[str]


def mounts(mountinfo: str) -> list[Mount]:
    """The cgroup mounts of /proc/self/mountinfo."""
    out = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        out.append(Mount(rest[0], Path(point), fields[3], frozenset(rest[2].split(","))))
    return out


def own_paths(proc_cgroup: str) -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def _under(mount: Mount, path: str) -> Path:
    """Where a hierarchy path is under a mount of (part of) that hierarchy."""
    rel = os.path.relpath(path, mount.root) if mount.root != "/" else path.lstrip("/")
    return mount.point if rel in (".", "") else mount.point / rel


def family_name(home_id: str) -> str:
    return f"cadre-desktop-{home_id}"


class CgroupTree:
    """The node groups of one home, in one cgroup version (v1: one root per controller)."""

    def __init__(self, ops: CgroupOps, version: int, roots: dict[str, Path], home_id: str) -> None:
        self.ops = ops
        self.version = version
        #: Controller ("memory", "cpu"; both map to one root on v2) -> the host's own group there.
        self.roots = roots
        self.family = family_name(home_id)

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(self.roots)

    def how(self) -> str:
        if self.version == 2:
            return "cgroup v2 subtree"
        names = " and ".join(c for c in ("memory", "cpu") if c in self.roots)
        plural = "s" if len(self.roots) > 1 else ""
        return f"cgroup v1 {names} controller{plural}"

    def node_dirs(self, node_id: str) -> dict[str, Path]:
        return {c: root / self.family / node_id for c, root in self.roots.items()}

    def place(self, node_id: str, pid: int, caps: NodeCaps) -> dict[str, int | None]:
        """Make (or re-use) the node's group, write its limits, put `pid` in it. Returns the
        group's memory counters before this start (read back at the exit)."""
        before = self.prepare(node_id, caps)
        self.join(node_id, pid)
        return before

    def prepare(self, node_id: str, caps: NodeCaps) -> dict[str, int | None]:
        """Make (or re-use) the node's group and write its limits, before its child starts.
        Returns the group's memory counters now (read back at the exit)."""
        dirs = self.node_dirs(node_id)
        for path in dict.fromkeys(dirs.values()):
            self.ops.mkdir(path.parent)
            self.ops.mkdir(path)
        if self.version == 2:
            self._limits_v2(dirs["memory"], caps)
        else:
            self._limits_v1(dirs, caps)
        return self.kill_counters(node_id)

    def procs_files(self, node_id: str) -> list[Path]:
        """The `cgroup.procs` file of each of the node's groups (one on v2)."""
        return [path / "cgroup.procs" for path in dict.fromkeys(self.node_dirs(node_id).values())]

    def join(self, node_id: str, pid: int) -> None:
        """Put `pid` in the node's groups (again, for a child that joined them itself)."""
        for path in self.procs_files(node_id):
            self.ops.write(path, str(pid))

    def holding(self, node_id: str, pid: int) -> frozenset[str]:
        """The controllers whose node group holds `pid` now, as the kernel lists it (`cgroup.procs`)."""
        held = set()
        for controller, path in self.node_dirs(node_id).items():
            try:
                if str(pid) in self.ops.read(path / "cgroup.procs").split():
                    held.add(controller)
            except OSError:
                continue
        return frozenset(held)

    def _limits_v2(self, path: Path, caps: NodeCaps) -> None:
        memory = str(caps.memory_mb << 20) if caps.memory_mb else "max"
        self.ops.write(path / "memory.max", memory)
        # Swap is no way round the cap (a kernel without swap accounting has no such file).
        self._try_write(path / "memory.swap.max", "0" if caps.memory_mb else "max")
        quota = str(caps.cpu_percent * CPU_PERIOD_US // 100) if caps.cpu_percent else "max"
        self.ops.write(path / "cpu.max", f"{quota} {CPU_PERIOD_US}")

    def _limits_v1(self, dirs: dict[str, Path], caps: NodeCaps) -> None:
        if "memory" in dirs:
            # -1: no limit. memory+swap (where swap is accounted) gets the same cap, so swap is no
            # way round it; lifted first, since it may never be below the memory limit.
            limit = str(caps.memory_mb << 20) if caps.memory_mb else "-1"
            memsw = dirs["memory"] / "memory.memsw.limit_in_bytes"
            self._try_write(memsw, "-1")
            self.ops.write(dirs["memory"] / "memory.limit_in_bytes", limit)
            self._try_write(memsw, limit)
        if "cpu" in dirs:
            self.ops.write(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            quota = caps.cpu_percent * CPU_PERIOD_US // 100 if caps.cpu_percent else -1
            self.ops.write(dirs["cpu"] / "cpu.cfs_quota_us", str(quota))

    def _try_write(self, path: Path, text: str) -> None:
        """A file only some kernels have (swap accounting)."""
        try:
            self.ops.write(path, text)
        except OSError:
            pass

    def memory_limit_mb(self, node_id: str) -> int | None:
        """The memory cap the node's group holds now (None: no group, or no cap)."""
        path = self.node_dirs(node_id).get("memory")
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        try:
            value = int(self.ops.read(path / name).strip()) if path is not None else 0
        except (OSError, ValueError):  # "max": no cap
            return None
        # v1 says "no limit" with a huge number (the page-rounded maximum).
        return value >> 20 if 0 < value < (1 << 60) else None

    def kill_counters(self, node_id: str) -> dict[str, int | None]:
        """The group's memory counters: `oom_kill` (processes the memory cap killed; None on a
        kernel without the count, before 4.13) and `failcnt` (v1: times it hit its limit)."""
        path = self.node_dirs(node_id).get("memory")
        counters: dict[str, int | None] = {"oom_kill": None, "failcnt": 0}
        if path is None:
            return counters
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in self.ops.read(path / name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    counters["oom_kill"] = int(value)
            if self.version == 1:
                counters["failcnt"] = int(self.ops.read(path / "memory.failcnt").strip() or 0)
        except (OSError, ValueError):
            pass
        return counters

    def killed_by_cap(self, node_id: str, before: dict[str, int | None], code: int | None) -> bool:
        """Whether the memory cap ended the group's child: its kill count grew, or (a kernel
        without one) it died of SIGKILL after the group hit its limit."""
        now = self.kill_counters(node_id)
        if now["oom_kill"] is not None and before["oom_kill"] is not None:
            return now["oom_kill"] > before["oom_kill"]
        return code == -9 and (now["failcnt"] or 0) > (before["failcnt"] or 0)

    def remove(self, node_id: str) -> list[str]:
        """Delete the node's group (its processes ended first); what could not be deleted."""
        left = []
        for path in dict.fromkeys(self.node_dirs(node_id).values()):
            left += self._rmdir(path)
        return left

    def remove_all(self) -> list[str]:
        """Delete every node group of this home and their family group."""
        left = []
        for root in dict.fromkeys(self.roots.values()):
            family = root / self.family
            for child in self.ops.children(family):
                left += self._rmdir(child)
            left += self._rmdir(family)
        return left

    def _rmdir(self, path: Path) -> list[str]:
        try:
            self.ops.rmdir(path)
        except FileNotFoundError:
            return []
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return []
            log.debug("could not delete the cgroup %s: %s", path, exc)
            return [f"{path}: {exc.strerror or exc}"]
        return []


def find_v2(ops: CgroupOps, home_id: str) -> CgroupTree | None:
    """The host's own v2 cgroup, when it may write there and its children get memory and cpu."""
    own = own_paths(ops.own_cgroups()).get("")
    mount = next((m for m in mounts(ops.mountinfo()) if m.fstype == "cgroup2"), None)
    if own is None or mount is None:
        return None
    path = _under(mount, own)
    try:
        delegated = set(ops.read(path / "cgroup.subtree_control").split())
    except OSError:
        return None
    if not {"memory", "cpu"} <= delegated or not ops.writable(path):
        return None
    return CgroupTree(ops, 2, {"memory": path, "cpu": path}, home_id)


def find_v1(ops: CgroupOps, home_id: str) -> CgroupTree | None:
    """The v1 `memory` and `cpu` hierarchies where this host's group in them is writable."""
    own = own_paths(ops.own_cgroups())
    roots: dict[str, Path] = {}
    for mount in mounts(ops.mountinfo()):
        if mount.fstype != "cgroup":
            continue
        for controller in ("memory", "cpu"):
            if controller in mount.options and controller in own and controller not in roots:
                path = _under(mount, own[controller])
                if ops.is_dir(path) and ops.writable(path):
                    roots[controller] = path
    return CgroupTree(ops, 1, roots, home_id) if roots else None
