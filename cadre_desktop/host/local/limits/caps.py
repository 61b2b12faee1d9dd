"""A node's caps, enforced by the OS: what the local driver does with them at each start.

One way per computer, chosen once when the driver is built (`choose`), the first
this computer allows of those its OS seam offers (`ProcessOS.caps_ways`):

* Linux: a transient systemd user scope over D-Bus (`scope`), else a cgroup v2
  subtree the host may write, else writable cgroup v1 `memory` and `cpu`
  controllers (`cgroups`);
* Windows: the node's Job object (`ProcessOS.limit_job`: its memory, its CPU rate);
* macOS, or where none of those is allowed: priority only, said plainly
  ("priority only: memory and cpu caps not enforced here: …").

`low_priority` is the OS's background priority everywhere (nice 10 on POSIX,
below normal on Windows). Caps are read at each start from `caps_for` (the
record's, else the settings'), so a change is taken at the node's next start.
Nothing here ever fails a start: a cap that cannot be set is logged, the node
runs, and its views say so: what a view says of a node is what the OS holds for its
child (`Held`: after each placement its groups' own `cgroup.procs` are read back; a
group that could not be made, a scope systemd refused, a job's limits refused), and
doctor makes a trial group before it says caps are enforced (`describe`). A child the
memory cap killed is told as such (`exit_cause`); Remove and Quit delete what was made
for the node (`forget`, `clear`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cadre_desktop.host.core.driver import CapsEnforcement, NodeCaps
from cadre_desktop.host.local.limits import cgroups, scope
from cadre_desktop.host.local.limits.cgroups import CgroupOps, CgroupTree
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

#: How long Remove and Quit try to delete a group whose last process is still going away.
REMOVE_WAIT_S = 2.0
KILLED = -9


class Child(Protocol):
    """What the caps read of a started child (the local driver's Handle)."""

    id: str
    node_id: str
    pid: int
    _job_handle: object | None


@dataclass(frozen=True)
class Way:
    """How this computer holds a node to its caps."""

    #: "systemd", "cgroup" (v1 or v2, see `tree`), "job", "priority".
    kind: str
    tree: CgroupTree | None = None
    scopes: scope.Scopes | None = None
    #: Why nothing better was available (for "priority only: …").
    why_not: str = ""

    def how(self) -> str:
        if self.kind == "systemd":
            return "systemd user scope"
        if self.kind == "job":
            return "job object"
        if self.tree is not None:
            return self.tree.how()
        return "priority only"

    def holds(self) -> frozenset[str]:
        """The caps it enforces: "memory", "cpu"."""
        if self.kind in ("systemd", "job"):
            return frozenset({"memory", "cpu"})
        return self.tree.controllers if self.tree is not None else frozenset()


def choose(system: ProcessOS, home_id: str, *, cgroup_ops: CgroupOps | None = None,
           scope_address: Callable[[], str | None] = scope.user_manager_address,
           make_scope_ops: Callable[[str], scope.ScopeOps] = scope.ScopeOps) -> Way:
    """The best way this computer allows (see the module's docstring)."""
    family = cgroups.family_name(home_id)
    if "job" in system.caps_ways:
        return Way("job")
    if "cgroup" not in system.caps_ways:
        return Way("priority", why_not="this OS has no per-process memory or CPU limit the host may set")
    address = scope_address()
    if address:
        return Way("systemd", scopes=scope.Scopes(make_scope_ops(address), family))
    ops = cgroup_ops or CgroupOps()
    try:
        tree = cgroups.find_v2(ops, home_id) or cgroups.find_v1(ops, home_id)
    except OSError as exc:
        return Way("priority", why_not=f"the cgroup tree cannot be read ({exc.strerror or exc})")
    if tree is not None:
        return Way("cgroup", tree=tree)
    return Way("priority", why_not="no systemd user manager, no delegated cgroup v2 subtree and no writable "
                                   "cgroup v1 memory or cpu controller")


def enforcement(way: Way, caps: NodeCaps) -> CapsEnforcement:
    """What a view says of `caps` held `way`."""
    wanted = {name for name, value in (("memory", caps.memory_mb), ("cpu", caps.cpu_percent)) if value}
    missing = sorted(set(("memory", "cpu")) - way.holds(), key=("memory", "cpu").index)
    how = way.how()
    if missing:
        what = " and ".join(missing) + (" caps" if len(missing) > 1 else " cap")
        why = way.why_not or "no writable controller for it"
        how = f"{how}: {what} not enforced here: {why}" if way.kind == "priority" else \
            f"{how}; {what} not enforced here: {why}"
    return CapsEnforcement(enforced=not (wanted - way.holds()), how=how)


@dataclass(frozen=True)
class Held:
    """What the OS was seen to hold a node's last child to, once it was placed."""

    #: The caps held: "memory", "cpu".
    caps: frozenset[str]
    #: Why the others are not (for "… not enforced for this node: …").
    why_not: str = ""


def held_enforcement(base: CapsEnforcement, caps: NodeCaps, held: Held | None) -> CapsEnforcement:
    """`base` (how this computer holds caps), told for one node's child: a cap set and not held
    for it is not enforced, and why."""
    if held is None:
        return base
    wanted = [name for name, value in (("memory", caps.memory_mb), ("cpu", caps.cpu_percent)) if value]
    missing = [name for name in wanted if name not in held.caps]
    if not missing:
        return base
    what = " and ".join(missing) + (" caps" if len(missing) > 1 else " cap")
    return CapsEnforcement(enforced=False, how=f"{base.how}; {what} not enforced for this node: {held.why_not}")


@dataclass
class _Placed:
    node_id: str
    memory_mb: int | None
    #: The group's memory counters at the start (`CgroupTree.kill_counters`).
    before: dict[str, int | None] = field(default_factory=dict)


class CapsKeeper:
    """The caps of one driver's children: set after each spawn, read at each exit, undone at
    Remove and Quit."""

    def __init__(self, way: Way, caps_for: Callable[[str], NodeCaps], *, system: ProcessOS) -> None:
        self.way = way
        self.caps_for = caps_for
        self.system = system
        #: handle id -> what was set for that child.
        self._placed: dict[str, _Placed] = {}
        #: node id -> the counters of its group made ready before its spawn (`before_spawn`).
        self._ready: dict[str, dict[str, int | None]] = {}
        #: node id -> what the OS holds its last child to (none: nothing to hold, or not placed here).
        self._held: dict[str, Held] = {}

    def enforcement(self, caps: NodeCaps, node_id: str | None = None) -> CapsEnforcement:
        """How `caps` are held here; for `node_id`, as the OS holds that node's child."""
        base = enforcement(self.way, caps)
        if node_id is None:
            return base
        refused = self.way.scopes.refused.get(node_id) if self.way.scopes is not None else None
        if refused is not None:
            return held_enforcement(base, caps, Held(frozenset(), refused))
        return held_enforcement(base, caps, self._held.get(node_id))

    def lower_soon(self, node_id: str) -> Callable[[int], None]:
        """What the spawn's thread does to the child right after its exec: its background priority
        at once, not when the loop gets to track it (`place` sets it again and says a failure), so
        in a storm the nodes starting never compete with the host at its own priority. Never raises."""
        try:
            low = self.caps_for(node_id).low_priority
        except Exception as exc:  # `place` reads them again and says why at its level
            log.debug("node %s: its caps could not be read before its spawn: %s", node_id, exc)
            low = False

        def lower(pid: int) -> None:
            if low:
                with contextlib.suppress(OSError, ValueError):
                    self.system.lower_priority(pid)
        return lower

    def starts_cold(self, node_id: str) -> bool:
        """True for a node whose memory cap a cgroup holds (a tree or a systemd scope): a group
        counts the pages a process touches once inside it, and a warm standby loaded its code
        before it was anyone's (v2 never moves a charge; v1 no longer can on current kernels, whose
        `memory.move_charge_at_immigrate` refuses a write), so such a node is started cold and
        holds all of its memory under its cap. Windows' job limits count what a process holds. Never raises."""
        try:
            return bool(self.caps_for(node_id).memory_mb) and (self.way.tree is not None or self.way.scopes is not None)
        except Exception as exc:  # no standby then: a cold start costs time, never a cap
            log.debug("node %s: its caps could not be read before its start: %s", node_id, exc)
            return True

    def before_spawn(self, node_id: str) -> list[Path]:
        """Right before a spawn: the node's cgroups made and their limits written; the
        `cgroup.procs` files its child joins before it runs its program (`procs.spawn`'s
        `join`; none for another way, or no cap). Never raises."""
        tree = self.way.tree
        self._ready.pop(node_id, None)
        try:
            node_caps = self.caps_for(node_id)
            if tree is None or not (node_caps.memory_mb or node_caps.cpu_percent):
                return []
            self._ready[node_id] = tree.prepare(node_id, node_caps)
            return tree.procs_files(node_id)
        except Exception as exc:  # placed after the spawn instead (`place`), said there if it fails again
            log.warning("node %s: its cgroups could not be made ready before its start: %s", node_id, exc)
            return []

    def place(self, child: Child) -> None:
        """Right after a spawn: the child's priority and its group. Never raises."""
        try:
            caps = self.caps_for(child.node_id)
            self._place(child, caps)
        except Exception as exc:  # a start never fails for its caps: said in the log, and by its views
            log.error("node %s: its caps could not be set, it runs without them: %s", child.node_id, exc)
            self._held[child.node_id] = Held(frozenset(), one_line(f"its group could not be made: {exc}", 300))

    def _place(self, child: Child, caps: NodeCaps) -> None:
        if caps.low_priority:
            try:
                self.system.lower_priority(child.pid)
            except (OSError, ValueError) as exc:
                log.warning("node %s: could not lower its priority: %s", child.node_id, exc)
        before: dict[str, int | None] = {}
        way = self.way
        self._held.pop(child.node_id, None)
        if not (caps.memory_mb or caps.cpu_percent):  # no group: a node with no cap is not put anywhere
            self._held[child.node_id] = Held(frozenset(), "its child was started without them (they apply from its next start)")
        elif way.tree is not None:
            ready = self._ready.pop(child.node_id, None)
            if ready is not None:  # made before the spawn; the pid again, in case it could not join
                way.tree.join(child.node_id, child.pid)
            before = ready if ready is not None else way.tree.place(child.node_id, child.pid, caps)
            self._held[child.node_id] = _holding(way.tree, child)
        elif way.scopes is not None:
            way.scopes.place(child.node_id, child.pid, caps)
        elif way.kind == "job" and not self.system.limit_job(
                child._job_handle, memory_mb=caps.memory_mb, cpu_percent=caps.cpu_percent,
                low_priority=caps.low_priority):
            self._held[child.node_id] = Held(frozenset(), "its job object's limits were refused")
        self._placed[child.id] = _Placed(child.node_id, caps.memory_mb, before)

    def adopted(self, child: Child) -> None:
        """A child an earlier host started: its group's cap (the one it was started with) and
        counters, so its exit can be told."""
        tree = self.way.tree
        if tree is not None:
            self._held[child.node_id] = _holding(tree, child)
            limit = tree.memory_limit_mb(child.node_id)
            if limit is not None:
                self._placed[child.id] = _Placed(child.node_id, limit, tree.kill_counters(child.node_id))

    def exit_cause(self, child: Child, code: int | None) -> str | None:
        """"stopped by its memory cap of N MB" when that cap killed the child, else None."""
        placed = self._placed.pop(child.id, None)
        if placed is None or not placed.memory_mb:
            return None
        words = f"stopped by its memory cap of {placed.memory_mb} MB"
        tree = self.way.tree
        if tree is not None and "memory" in tree.controllers and placed.before:
            return words if tree.killed_by_cap(placed.node_id, placed.before, code) else None
        if self.way.scopes is not None and code == KILLED:
            # The scope is collected with its processes: a kill is the memory cap's.
            return words
        if self.way.kind == "job" and code not in (0, None):
            return words if self.system.job_hit_memory_limit(child._job_handle) else None
        return None

    async def forget(self, node_id: str) -> None:
        """Remove: the node's processes have ended; delete its group or scope."""
        for handle_id in [h for h, p in self._placed.items() if p.node_id == node_id]:
            del self._placed[handle_id]
        self._held.pop(node_id, None)
        if self.way.scopes is not None:
            await self.way.scopes.remove(node_id)
        tree = self.way.tree
        if tree is not None:
            await _until_gone(lambda: tree.remove(node_id), f"node {node_id}'s cgroup")

    async def clear(self) -> None:
        """Quit (stopping the nodes): every group and scope of this home is deleted."""
        self._placed.clear()
        self._held.clear()
        if self.way.scopes is not None:
            await self.way.scopes.remove_all()
        tree = self.way.tree
        if tree is not None:
            await _until_gone(tree.remove_all, "the nodes' cgroups")


async def _until_gone(remove: Callable[[], list[str]], what: str) -> None:
    """Delete, again for a moment while a group's last process is still leaving it."""
    deadline = time.monotonic() + REMOVE_WAIT_S
    left = await asyncio.to_thread(remove)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        left = await asyncio.to_thread(remove)
    if left:
        log.warning("could not delete %s: %s", what, "; ".join(left))


def no_caps(system: ProcessOS) -> CapsKeeper:
    """For a driver built without caps (tests, tools): nothing capped, no priority change."""
    return CapsKeeper(Way("priority", why_not="this driver was built without caps"),
                      lambda _node_id: NodeCaps(low_priority=False), system=system)


def _holding(tree: CgroupTree, child: Child) -> Held:
    """What the node's groups hold of its child, read back from the OS (their `cgroup.procs`)."""
    held = tree.holding(child.node_id, child.pid)
    missing = sorted(tree.controllers - held)
    why = f"its child (pid {child.pid}) is not in its {' and '.join(missing)} group" if missing else ""
    return Held(held, why)


def describe(way: Way) -> dict[str, str | bool]:
    """What doctor says: how caps are held on this computer. A group is tried first (made,
    limited, deleted), so a tree the host cannot write after all is said, with why."""
    full = enforcement(way, NodeCaps(cpu_percent=100, memory_mb=1024))
    failed = _trial(way.tree) if way.tree is not None else None
    if failed is not None:
        return {"how": f"{full.how}; not enforced here: a node's group could not be made: {failed}",
                "enforced": False}
    return {"how": full.how, "enforced": full.enforced}


def _trial(tree: CgroupTree) -> str | None:
    """Make a trial node group with limits, then delete it: None when that worked, else why."""
    try:
        tree.prepare("doctor-trial", NodeCaps(cpu_percent=100, memory_mb=1024))
    except OSError as exc:
        return one_line(str(exc), 300)
    finally:
        tree.remove_all()
    return None
