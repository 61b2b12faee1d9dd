"""Caps for real, on this computer's cgroups (the local driver with the caps it chooses here).

A node that allocates past its memory cap is stopped, and its exit says so; a busy node
capped at 20 % of a core gets about that; Remove and Quit leave nothing in the cgroup tree.
Skipped, with the reason, where no cgroup controller is writable.
"""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

import psutil
import pytest

from cadre_desktop.host.core.driver import NodeCaps
from cadre_desktop.host.local.handles import ExitEvent
from cadre_desktop.host.local.limits import caps, cgroups
from cadre_desktop.host.local.orchestrator import Orchestrator
from cadre_desktop.host.local.ports import PortAllocator
from cadre_desktop.paths import Paths
from tests.support.polling import async_wait_until
from tests.support.processes import THIS_OS
from tests.support.real_orchestrator import port_range

CAP_NODES = str(Path(__file__).resolve().parents[1] / "support" / "cap_nodes.py")


def this_computers_way(home_id: str) -> caps.Way:
    way = caps.choose(THIS_OS, home_id, scope_address=lambda: None)
    if way.tree is None:
        pytest.skip(f"no cgroup controller is writable here: {caps.enforcement(way, NodeCaps(20, 64)).how}")
    return way


def capped(home: Path, mode: str, node_caps: dict[str, NodeCaps],
           command: list[str] | None = None, warm_standby: bool = False) -> tuple[Orchestrator, caps.Way]:
    way = this_computers_way("htest" + secrets.token_hex(6))
    keeper = caps.CapsKeeper(way, lambda node_id: node_caps[node_id], system=THIS_OS)
    orch = Orchestrator(
        paths=Paths(home, home, home / "logs"), node_command=command or [sys.executable, CAP_NODES, mode],
        ports=PortAllocator(*port_range(home), bind_host="127.0.0.1"), bind_host="127.0.0.1",
        advertise_host=lambda: "127.0.0.1", stop_timeout_s=2.0, caps=keeper, warm_standby=warm_standby,
    )
    return orch, way


def family_dirs(way: caps.Way) -> list[Path]:
    assert way.tree is not None
    return [root / way.tree.family for root in way.tree.roots.values()]


async def test_a_node_past_its_memory_cap_is_stopped_and_told_in_words(tmp_path):
    orch, way = capped(tmp_path, "hog", {"n1": NodeCaps(memory_mb=64, low_priority=False)})
    assert way.tree is not None
    if "memory" not in way.tree.controllers:
        pytest.skip("the memory controller is not writable here")
    await orch.init()
    exits: list[ExitEvent] = []
    orch.subscribe(exits.append)
    try:
        await orch.spawn("n1", {})
        await async_wait_until(lambda: exits, timeout=30, what="the hog's exit")
        assert exits[0].cause == "stopped by its memory cap of 64 MB"
        assert exits[0].returncode == -9 and not exits[0].requested
        held = [line for line in orch.log_tail("n1", 5) if line.startswith("holding")]
        assert held and int(held[-1].split()[1]) <= 64  # it never held more than its cap
    finally:
        await orch.stop_all()
        orch.close()


async def test_a_capped_node_runs_in_its_groups_from_its_first_instruction(tmp_path):
    """Not moved in after its spawn: a page touched before that stays charged outside the cap
    (a hog held 72 MiB under a 64 MiB cap on a busy machine). `cat` reads its cgroups at once."""
    orch, way = capped(tmp_path, "", {"n1": NodeCaps(cpu_percent=50, memory_mb=64, low_priority=False)},
                       command=["cat", "/proc/self/cgroup"])
    assert way.tree is not None
    await orch.init()
    exits: list[ExitEvent] = []
    orch.subscribe(exits.append)
    try:
        await orch.spawn("n1", {})
        await async_wait_until(lambda: exits, timeout=30, what="cat's exit")
        lines = orch.log_tail("n1", 20)
        for controller in [""] if way.tree.version == 2 else way.tree.controllers:
            seen = [line for line in lines if controller in line.split(":")[1].split(",")]
            assert seen and seen[0].endswith(f"/{way.tree.family}/n1"), (controller, lines)
    finally:
        await orch.stop_all()
        orch.close()


async def test_a_node_with_a_memory_cap_starts_cold_and_one_without_takes_the_standby(tmp_path):
    """A warm standby loaded its code (most of a node's memory) before it was anyone's, charged
    outside every node's group, where a move into the group leaves it: a node whose memory cap a
    cgroup holds is started cold, in its groups from its first instruction; a node with a CPU
    cap alone still takes the standby."""
    both = {"mem": NodeCaps(memory_mb=256, low_priority=False), "cpu": NodeCaps(cpu_percent=50, low_priority=False)}
    orch, way = capped(tmp_path, "", both, command=[sys.executable, "-m", "cadre_desktop.node"], warm_standby=True)
    assert way.tree is not None
    await orch.init()
    try:
        def loaded() -> int | None:
            ready = orch.standby.ready if orch.standby is not None else None
            return ready.popen.pid if ready is not None else None
        standby_pid = await async_wait_until(loaded, timeout=60, interval=0.05, what="a loaded standby")
        capped_node = await orch.spawn("mem", {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(24)})
        assert capped_node.pid != standby_pid, "a node with a memory cap took the standby"
        assert loaded() == standby_pid, "the standby was spent on nothing"
        own = Path(f"/proc/{capped_node.pid}/cgroup").read_text()
        assert f"/{way.tree.family}/mem" in own, own
        cpu_only = await orch.spawn("cpu", {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(24)})
        # Forked from the standby (which stays, its exec-time environment the node's), or the standby itself.
        assert cpu_only.pid == standby_pid or (
            psutil.Process(cpu_only.pid).environ().get("CADRE_STANDBY") == "1" and loaded() == standby_pid), \
            "a node with no memory cap started cold"
        own = Path(f"/proc/{cpu_only.pid}/cgroup").read_text()
        assert f"/{way.tree.family}/cpu" in own, own
    finally:
        await orch.stop_all()
        orch.close()


async def test_a_busy_node_capped_at_20_percent_gets_about_that(tmp_path):
    orch, way = capped(tmp_path, "busy", {"n1": NodeCaps(cpu_percent=20, low_priority=False)})
    assert way.tree is not None
    if "cpu" not in way.tree.controllers:
        pytest.skip("the cpu controller is not writable here")
    await orch.init()
    try:
        handle = await orch.spawn("n1", {})
        proc = psutil.Process(handle.pid)
        start_wall, start_cpu = time.monotonic(), sum(proc.cpu_times()[:2])
        # Two seconds of its CPU time: about ten of the wall clock at 20 %, two without a cap.
        used = await async_wait_until(lambda: (sum(proc.cpu_times()[:2]) - start_cpu) >= 2.0, timeout=90,
                                      interval=0.1, what="two seconds of the node's CPU time")
        assert used
        share = (sum(proc.cpu_times()[:2]) - start_cpu) / (time.monotonic() - start_wall)
        assert share <= 0.25, f"a node capped at 20 % used {share:.0%} of a core"
    finally:
        await orch.stop_all()
        orch.close()


async def test_remove_and_quit_leave_nothing_in_the_cgroup_tree(tmp_path):
    both = NodeCaps(cpu_percent=50, memory_mb=256, low_priority=False)
    orch, way = capped(tmp_path, "busy", {"n1": both, "n2": NodeCaps(cpu_percent=50, memory_mb=256)})
    assert way.tree is not None
    await orch.init()
    try:
        for node_id in ("n1", "n2"):
            handle = await orch.spawn(node_id, {})
            for group in way.tree.node_dirs(node_id).values():
                assert str(handle.pid) in (group / "cgroup.procs").read_text().split()
        assert psutil.Process(orch.handles_for("n2")[0].pid).nice() == 10  # low priority: the OS's background
        assert psutil.Process(orch.handles_for("n1")[0].pid).nice() == 0
        await orch.remove_node("n1")
        assert not any(group.exists() for group in way.tree.node_dirs("n1").values())
        assert all(group.exists() for group in way.tree.node_dirs("n2").values())
        await orch.stop_all()
        assert not any(family.exists() for family in family_dirs(way))
    finally:
        await orch.stop_all()
        orch.close()


def test_the_groups_are_where_this_host_may_write():
    way = this_computers_way("htest")
    assert way.tree is not None
    own = cgroups.own_paths(Path("/proc/self/cgroup").read_text())
    for controller, root in way.tree.roots.items():
        assert root.is_dir() and str(root).endswith(own["" if way.tree.version == 2 else controller].rstrip("/"))


async def test_a_node_whose_group_cannot_be_made_is_said_not_enforced_in_every_view(tmp_path):
    """Regression (issue 39, item 3): the node's cgroup could not be made (its controller's group
    was gone: "No such file or directory"), it ran in the host's own group, and `node show`, the
    JSON, the window and doctor all said its caps were enforced. Here on this computer's real
    cgroups, the group of each controller this host writes is one of ours, deleted before the start."""
    home_id = "htest" + secrets.token_hex(6)
    way = this_computers_way(home_id)
    assert way.tree is not None
    gone = {c: root / f"cadre-test-gone-{secrets.token_hex(4)}" for c, root in way.tree.roots.items()}
    for path in dict.fromkeys(gone.values()):
        path.mkdir()
        path.rmdir()
    broken = caps.Way("cgroup", tree=cgroups.CgroupTree(cgroups.CgroupOps(), way.tree.version, gone, home_id))
    node_caps = NodeCaps(cpu_percent=50, memory_mb=256, low_priority=False)
    keeper = caps.CapsKeeper(broken, lambda _node_id: node_caps, system=THIS_OS)
    orch = Orchestrator(
        paths=Paths(tmp_path, tmp_path, tmp_path / "logs"), node_command=[sys.executable, CAP_NODES, "busy"],
        ports=PortAllocator(*port_range(tmp_path), bind_host="127.0.0.1"), bind_host="127.0.0.1",
        advertise_host=lambda: "127.0.0.1", stop_timeout_s=2.0, caps=keeper,
    )
    await orch.init()
    try:
        handle = await orch.spawn("n1", {})
        with open(f"/proc/{handle.pid}/cgroup", encoding="ascii") as fh:
            assert broken.tree is not None and broken.tree.family not in fh.read(), "the node is in a group after all"
        said = orch.caps_enforcement(node_caps, "n1")
        assert said.enforced is False, said
        assert "not enforced for this node" in said.how and "No such file or directory" in said.how, said
        doctor = caps.describe(broken)
        assert doctor["enforced"] is False and "could not be made" in str(doctor["how"]), doctor
        assert caps.describe(way)["enforced"] is True, "doctor refuses a tree this host can write"
    finally:
        await orch.stop_all()
        orch.close()
