"""Caps per node: the settings' checks, the record's fields, and each platform's way of
enforcing them, with fake OS seams (a cgroup tree in memory, a systemd manager, job calls)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from cadre_desktop.errors import Invalid, SettingsError
from cadre_desktop.host.core.driver import NodeCaps
from cadre_desktop.host.core.ops.caps import caps_view, check_caps_change, node_caps
from cadre_desktop.host.core.records.records import NodeStatus, record_from_row
from cadre_desktop.host.local.limits import caps, cgroups, scope
from cadre_desktop.host.local.system import winjob
from cadre_desktop.host.local.system.linux import LinuxOS
from cadre_desktop.host.local.system.posix import PosixOS
from cadre_desktop.host.local.system.windows import WindowsOS
from cadre_desktop.settings import Settings, parse_settings
from tests.support.fake_caps import FakeChild, FakeJobOps, FakeKernel32, FakePriority, FakeScopeOps, recording_os, v1_tree, v2_tree

LINUX, POSIX, WINDOWS = LinuxOS(), PosixOS(), WindowsOS()

MEM = Path("/sys/fs/cgroup/memory/sandbox/me")
CPU = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup/user.slice/app.slice/me")
CORES = os.cpu_count() or 1


# -- settings and records ------------------------------------------------------------------

def test_caps_settings_default_to_no_cap_and_low_priority():
    s = parse_settings({}, "settings.json")
    assert (s.node_cpu_percent, s.node_memory_mb, s.node_low_priority) == (None, None, True)
    s = parse_settings({"node_cpu_percent": 50, "node_memory_mb": 256, "node_low_priority": False}, "x")
    assert (s.node_cpu_percent, s.node_memory_mb, s.node_low_priority) == (50, 256, False)


@pytest.mark.parametrize("key, value", [
    ("node_cpu_percent", 0), ("node_cpu_percent", 100 * CORES + 1), ("node_cpu_percent", 12.5),
    ("node_cpu_percent", True), ("node_memory_mb", 31), ("node_memory_mb", "256"), ("node_memory_mb", 1 << 30),
    ("node_low_priority", "yes"), ("node_low_priority", None),
])
def test_a_bad_cap_setting_is_an_error_naming_its_key(key, value):
    with pytest.raises(SettingsError) as err:
        parse_settings({key: value}, "settings.json")
    assert repr(key) in err.value.message


def test_a_cpu_cap_may_be_every_core():
    assert parse_settings({"node_cpu_percent": 100 * CORES}, "x").node_cpu_percent == 100 * CORES


def test_a_row_without_caps_loads_and_is_written_back_without_them():
    row = {"name": "a", "status": "joined", "mode": "claim", "cadre": "c"}
    record = record_from_row("n1", row)
    assert (record.cpu_percent, record.memory_mb, record.always_run) == (None, None, False)
    assert not {"cpu_percent", "memory_mb", "always_run"} & set(record.to_row())


def test_a_rows_caps_survive_a_round_trip():
    record = record_from_row("n1", {"name": "a", "status": "joined", "cpu_percent": 50, "memory_mb": 256,
                                    "always_run": True})
    again = record_from_row("n1", record.to_row())
    assert (again.cpu_percent, again.memory_mb, again.always_run, again.status) == (50, 256, True, NodeStatus.JOINED)
    assert again.extra == {}


@pytest.mark.parametrize("field, value", [("cpu_percent", "50"), ("memory_mb", 0), ("always_run", 1)])
def test_a_row_with_a_cap_of_the_wrong_shape_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        record_from_row("n1", {"name": "a", "status": "joined", field: value})


def test_a_nodes_own_caps_win_over_the_hosts():
    settings = Settings(node_cpu_percent=80, node_memory_mb=512, node_low_priority=False)
    own = record_from_row("n1", {"name": "a", "status": "joined", "memory_mb": 64})
    assert node_caps(own, settings) == NodeCaps(cpu_percent=80, memory_mb=64, low_priority=False)
    assert node_caps(None, settings) == NodeCaps(cpu_percent=80, memory_mb=512, low_priority=False)


@pytest.mark.parametrize("body, words", [
    ({"memory_mb": 31}, "memory_mb"), ({"cpu_percent": 0}, "cpu_percent"),
    ({"cpu_percent": 100 * CORES + 1}, "cpu_percent"), ({"always_run": "yes"}, "always_run"),
    ({"colour": 1}, "colour"), ({}, "Nothing to change"), ({"memory_mb": 12.5}, "memory_mb"),
])
def test_a_bad_caps_change_is_one_clear_error(body, words):
    with pytest.raises(Invalid, match=words):
        check_caps_change(body)


def test_a_caps_change_may_set_back_the_hosts_default():
    assert check_caps_change({"memory_mb": None, "cpu_percent": 20, "always_run": True}) == \
        {"memory_mb": None, "cpu_percent": 20, "always_run": True}


# -- choosing the way ------------------------------------------------------------------------

def no_manager() -> str | None:
    return None


def test_linux_prefers_a_systemd_user_scope():
    way = caps.choose(LINUX, "habc", scope_address=lambda: "unix:path=/run/user/1000/bus",
                      make_scope_ops=lambda _a: FakeScopeOps(), cgroup_ops=v1_tree())
    assert way.kind == "systemd"
    assert caps.enforcement(way, NodeCaps(50, 256)).how == "systemd user scope"


def test_linux_takes_a_delegated_v2_subtree_next():
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=v2_tree())
    assert way.tree is not None and way.tree.version == 2
    assert caps.enforcement(way, NodeCaps(50, 256)) .how == "cgroup v2 subtree"


def test_a_v2_subtree_without_the_controllers_is_not_used():
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=v2_tree(subtree_control="pids"))
    assert way.kind == "priority"


def test_linux_falls_back_to_writable_v1_controllers():
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=v1_tree())
    assert way.tree is not None and way.tree.version == 1
    assert way.tree.roots == {"memory": MEM, "cpu": CPU}
    seen = caps.enforcement(way, NodeCaps(20, 256))
    assert (seen.enforced, seen.how) == (True, "cgroup v1 memory and cpu controllers")


def test_a_v1_controller_that_is_not_writable_is_said_not_enforced():
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=v1_tree(read_only=(str(CPU),)))
    seen = caps.enforcement(way, NodeCaps(cpu_percent=20))
    assert not seen.enforced
    assert seen.how.startswith("cgroup v1 memory controller; cpu cap not enforced here")
    assert caps.enforcement(way, NodeCaps(memory_mb=64)).enforced


def test_nothing_writable_is_priority_only_said_plainly():
    way = caps.choose(LINUX, "habc", scope_address=no_manager,
                      cgroup_ops=v1_tree(read_only=(str(CPU), str(MEM))))
    seen = caps.enforcement(way, NodeCaps(memory_mb=256))
    assert not seen.enforced
    assert seen.how.startswith("priority only: memory and cpu caps not enforced here: no systemd user manager")


def test_macos_is_priority_only():
    way = caps.choose(POSIX, "habc")
    assert caps.enforcement(way, NodeCaps(memory_mb=256)).how.startswith(
        "priority only: memory and cpu caps not enforced here: this OS")
    # Nothing asked, nothing missing: enforced.
    assert caps.enforcement(way, NodeCaps()).enforced


def test_windows_uses_the_job_object():
    seen = caps.enforcement(caps.choose(WINDOWS, "habc"), NodeCaps(50, 256))
    assert (seen.enforced, seen.how) == (True, "job object")


def test_the_view_carries_what_is_set_and_how():
    doc = caps_view(NodeCaps(20, 256, True), caps.enforcement(caps.choose(WINDOWS, "h"), NodeCaps(20, 256)))
    assert doc == {"cpu_percent": 20, "memory_mb": 256, "low_priority": True, "enforced": True, "how": "job object"}


def test_systemd_user_manager_needs_its_runtime_folder(tmp_path):
    assert scope.user_manager_address({"XDG_RUNTIME_DIR": str(tmp_path)}, 1000) is None
    (tmp_path / "systemd").mkdir()
    (tmp_path / "bus").touch()
    assert scope.user_manager_address({"XDG_RUNTIME_DIR": str(tmp_path)}, 1000) == f"unix:path={tmp_path}/bus"
    env = {"XDG_RUNTIME_DIR": str(tmp_path), "DBUS_SESSION_BUS_ADDRESS": "unix:abstract=x"}
    assert scope.user_manager_address(env, 1000) == "unix:abstract=x"


# -- each way at a start, an exit, a Remove and a Quit -------------------------------------

def keeper_for(way: caps.Way, node_caps_: NodeCaps, platform: str = "linux",
               jobs: FakeJobOps | None = None) -> tuple[caps.CapsKeeper, FakePriority]:
    """A keeper over one platform's OS seam, its priority calls recorded (and its job calls, on Windows)."""
    priority = FakePriority()
    system = recording_os(platform, priority, jobs)
    return caps.CapsKeeper(way, lambda _node_id: node_caps_, system=system), priority


def test_v1_start_makes_the_group_writes_its_limits_and_adds_the_child():
    ops = v1_tree()
    keeper, priority = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                                  NodeCaps(cpu_percent=20, memory_mb=256))
    keeper.place(FakeChild("n1", 4242))
    mem, cpu = MEM / "cadre-desktop-habc" / "n1", CPU / "cadre-desktop-habc" / "n1"
    assert ops.files[mem / "memory.limit_in_bytes"] == str(256 << 20)
    assert ops.files[cpu / "cpu.cfs_quota_us"] == "20000"
    assert ops.files[cpu / "cpu.cfs_period_us"] == "100000"
    assert ops.files[mem / "cgroup.procs"] == ops.files[cpu / "cgroup.procs"] == "4242"
    assert priority.lowered == [4242]


def test_v1_group_is_reused_and_its_limits_lifted_when_the_cap_goes():
    ops = v1_tree()
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops)
    keeper, _ = keeper_for(way, NodeCaps(cpu_percent=20, memory_mb=256))
    keeper.place(FakeChild("n1", 1))
    keeper.caps_for = lambda _n: NodeCaps(cpu_percent=20, memory_mb=None)
    keeper.place(FakeChild("n1", 2))
    assert ops.files[MEM / "cadre-desktop-habc" / "n1" / "memory.limit_in_bytes"] == "-1"


def test_a_node_with_no_cap_is_put_in_no_group_but_still_runs_low():
    ops = v1_tree()
    keeper, priority = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                                  NodeCaps())
    keeper.place(FakeChild("n1", 7))
    assert ops.writes == []
    assert priority.lowered == [7]


def test_v2_start_writes_memory_max_and_cpu_max():
    ops = v2_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                           NodeCaps(cpu_percent=150, memory_mb=64, low_priority=False))
    keeper.place(FakeChild("n1", 9))
    node = V2 / "cadre-desktop-habc" / "n1"
    assert ops.files[node / "memory.max"] == str(64 << 20)
    assert ops.files[node / "cpu.max"] == "150000 100000"
    assert ops.files[node / "cgroup.procs"] == "9"


@pytest.mark.parametrize("tree, counter, text", [
    (v1_tree, MEM / "cadre-desktop-habc" / "n1" / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill {}\n"),
    (v2_tree, V2 / "cadre-desktop-habc" / "n1" / "memory.events", "low 0\nhigh 0\nmax 9\noom 1\noom_kill {}\n"),
])
def test_an_exit_the_memory_cap_caused_is_said_in_words(tree, counter, text):
    ops = tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                           NodeCaps(memory_mb=256))
    ops.dirs.add(counter.parent.parent)
    ops.dirs.add(counter.parent)
    ops.files[counter] = text.format(2)
    child = FakeChild("n1", 5)
    keeper.place(child)
    ops.files[counter] = text.format(3)
    assert keeper.exit_cause(child, -9) == "stopped by its memory cap of 256 MB"
    other = FakeChild("n1", 6)
    keeper.place(other)
    assert keeper.exit_cause(other, -9) is None  # killed, but not by the cap


def test_remove_and_quit_leave_no_group_behind():
    ops = v1_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                           NodeCaps(cpu_percent=20, memory_mb=256))
    keeper.place(FakeChild("n1", 1))
    keeper.place(FakeChild("n2", 2))
    asyncio.run(keeper.forget("n1"))
    assert not {MEM / "cadre-desktop-habc" / "n1", CPU / "cadre-desktop-habc" / "n1"} & ops.dirs
    assert MEM / "cadre-desktop-habc" / "n2" in ops.dirs
    asyncio.run(keeper.clear())
    assert not [d for d in ops.dirs if "cadre-desktop" in str(d)]


def test_a_group_still_busy_is_retried_until_its_last_process_left():
    ops = v1_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                           NodeCaps(memory_mb=256))
    keeper.place(FakeChild("n1", 1))
    group = MEM / "cadre-desktop-habc" / "n1"
    ops.busy.add(group)

    async def leave_soon() -> None:
        removal = asyncio.ensure_future(keeper.forget("n1"))
        await asyncio.sleep(0)
        ops.busy.discard(group)
        await removal

    asyncio.run(leave_soon())
    assert group not in ops.dirs


def test_systemd_start_asks_for_a_scope_with_the_caps_and_stops_it_at_remove():
    manager = FakeScopeOps()
    way = caps.choose(LINUX, "habc", scope_address=lambda: "unix:x", make_scope_ops=lambda _a: manager)
    keeper, _ = keeper_for(way, NodeCaps(cpu_percent=20, memory_mb=256))

    async def run() -> None:
        keeper.place(FakeChild("n1", 77))
        await asyncio.sleep(0)
        await keeper.forget("n1")

    asyncio.run(run())
    unit, props = manager.started[0]
    assert unit == "cadre-desktop-habc-n1-77.scope"
    assert ("PIDs", "au", [77]) in props
    assert ("MemoryMax", "t", 256 << 20) in props
    assert ("CPUQuotaPerSecUSec", "t", 200_000) in props
    assert manager.stopped == [unit]


def test_a_scope_systemd_refuses_leaves_the_node_running_uncapped(caplog):
    way = caps.choose(LINUX, "habc", scope_address=lambda: "unix:x", make_scope_ops=lambda _a: FakeScopeOps(fail=True))
    keeper, _ = keeper_for(way, NodeCaps(memory_mb=256))

    async def run() -> None:
        keeper.place(FakeChild("n1", 77))
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(run())
    assert "could not make its systemd scope" in caplog.text


@pytest.mark.parametrize("platform, make_way, node_caps_, cold", [
    ("linux", lambda: caps.choose(LINUX, "h", scope_address=no_manager, cgroup_ops=v1_tree()), NodeCaps(memory_mb=64), True),
    ("linux", lambda: caps.choose(LINUX, "h", scope_address=no_manager, cgroup_ops=v2_tree()), NodeCaps(memory_mb=64), True),
    ("linux", lambda: caps.choose(LINUX, "h", scope_address=lambda: "unix:x", make_scope_ops=lambda _a: FakeScopeOps()),
     NodeCaps(memory_mb=64), True),
    ("linux", lambda: caps.choose(LINUX, "h", scope_address=no_manager, cgroup_ops=v1_tree()), NodeCaps(cpu_percent=20), False),
    ("linux", lambda: caps.choose(LINUX, "h", scope_address=no_manager, cgroup_ops=v1_tree()), NodeCaps(), False),
    ("win32", lambda: caps.choose(WINDOWS, "h"), NodeCaps(memory_mb=64), False),
    ("darwin", lambda: caps.choose(POSIX, "h"), NodeCaps(memory_mb=64), False),
])
def test_a_node_whose_memory_cap_a_cgroup_holds_starts_cold(platform, make_way, node_caps_, cold):
    """A group counts what a process touches inside it, a job what it holds: a standby's code,
    loaded before it was anyone's, would escape a group's memory cap, not a job's."""
    keeper, _ = keeper_for(make_way(), node_caps_, platform=platform)
    assert keeper.starts_cold("n1") is cold


def test_a_node_whose_caps_cannot_be_read_starts_cold():
    def unreadable(_node_id: str) -> NodeCaps:
        raise OSError("the records are unreadable")
    way = caps.choose(LINUX, "h", scope_address=no_manager, cgroup_ops=v1_tree())
    assert caps.CapsKeeper(way, unreadable, system=LINUX).starts_cold("n1") is True


def test_windows_start_sets_the_jobs_memory_cpu_rate_and_priority():
    jobs = FakeJobOps()
    keeper, priority = keeper_for(caps.choose(WINDOWS, "habc"), NodeCaps(cpu_percent=50, memory_mb=256),
                                  platform="win32", jobs=jobs)
    keeper.place(FakeChild("n1", 3, job="JOB"))
    assert jobs.calls == [("limits", "JOB", 256 << 20, winjob.BELOW_NORMAL_PRIORITY_CLASS),
                          ("cpu_rate", "JOB", 2500)]  # 50 % of one core of two: 25 % of all
    assert priority.lowered == [3]


def test_the_job_limits_keep_kill_on_close():
    k = FakeKernel32()
    winjob.JobOps(k).set_limits("JOB", memory_bytes=64 << 20, priority_class=None)
    winjob.JobOps(k).set_cpu_rate("JOB", 1250)
    (cls, info), (rate_cls, rate) = k.infos
    assert cls == winjob.JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS
    flags = info.BasicLimitInformation.LimitFlags
    assert flags & winjob.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE and flags & winjob.JOB_OBJECT_LIMIT_JOB_MEMORY
    assert info.JobMemoryLimit == 64 << 20
    assert rate_cls == winjob.JOB_OBJECT_CPU_RATE_CONTROL_INFORMATION_CLASS and rate.CpuRate == 1250


def test_cpu_rate_is_a_share_of_every_cpu():
    assert winjob.cpu_rate(50, 4) == 1250
    assert winjob.cpu_rate(400, 4) == 10_000
    assert winjob.cpu_rate(1, 64) == 1


def test_a_cap_that_cannot_be_set_never_fails_the_start(caplog):
    ops = v1_tree()
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops)
    ops.dirs.discard(MEM)  # the group went away under us
    keeper, _ = keeper_for(way, NodeCaps(memory_mb=256))
    keeper.place(FakeChild("n1", 1))
    assert "its caps could not be set" in caplog.text


def test_mounts_and_own_paths_read_the_proc_files():
    found = cgroups.mounts("35 31 0:32 /sandbox /mnt/mem rw - cgroup cgroup rw,memory\nnot a line\n")
    assert found == [cgroups.Mount("cgroup", Path("/mnt/mem"), "/sandbox", frozenset({"rw", "memory"}))]
    assert cgroups.own_paths("4:cpu,cpuacct:/a\n0::/b\n") == {"cpu": "/a", "cpuacct": "/a", "": "/b"}


@pytest.mark.parametrize("code, words", [(-9, "stopped by its memory cap of 256 MB"), (1, None)])
def test_without_a_kill_count_a_sigkill_after_the_limit_was_hit_is_the_caps(code, words):
    ops = v1_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                           NodeCaps(memory_mb=256))
    group = MEM / "cadre-desktop-habc" / "n1"
    ops.dirs |= {group.parent, group}
    ops.files[group / "memory.oom_control"] = "oom_kill_disable 0\nunder_oom 0\n"  # a kernel before 4.13
    ops.files[group / "memory.failcnt"] = "0"
    child = FakeChild("n1", 5)
    keeper.place(child)
    ops.files[group / "memory.failcnt"] = "17"
    assert keeper.exit_cause(child, code) == words


def test_a_child_of_an_earlier_host_is_told_by_its_groups_counters_too():
    ops = v1_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                           NodeCaps(memory_mb=256))
    group = MEM / "cadre-desktop-habc" / "n1"
    ops.dirs |= {group.parent, group}
    ops.files[group / "memory.oom_control"] = "oom_kill 4\n"
    ops.files[group / "memory.limit_in_bytes"] = str(256 << 20)  # what it was started with
    keeper.caps_for = lambda _n: NodeCaps(memory_mb=512)  # changed since: taken at its next start
    child = FakeChild("n1", 5)
    keeper.adopted(child)
    ops.files[group / "memory.oom_control"] = "oom_kill 5\n"
    assert keeper.exit_cause(child, -9) == "stopped by its memory cap of 256 MB"


def test_a_child_of_an_earlier_host_without_a_memory_cap_is_never_said_killed_by_one():
    ops = v1_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops), NodeCaps())
    group = MEM / "cadre-desktop-habc" / "n1"
    ops.dirs |= {group.parent, group}
    ops.files[group / "memory.limit_in_bytes"] = "9223372036854771712"  # v1's "no limit"
    ops.files[group / "memory.oom_control"] = "oom_kill 0\n"
    child = FakeChild("n1", 5)
    keeper.adopted(child)
    ops.files[group / "memory.oom_control"] = "oom_kill 1\n"
    assert keeper.exit_cause(child, -9) is None


def test_low_priority_is_below_normal_on_windows_and_nice_10_elsewhere(monkeypatch):
    import psutil

    seen: list[tuple[str, int, int]] = []

    class Proc:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def nice(self, value: int) -> None:
            seen.append(("nice", self.pid, value))

    monkeypatch.setattr(psutil, "Process", Proc)
    monkeypatch.setattr(os, "setpriority", lambda which, pid, value: seen.append(("setpriority", pid, value)),
                        raising=False)
    WindowsOS().lower_priority(7)
    PosixOS().lower_priority(8)
    assert seen == [("nice", 7, getattr(psutil, "BELOW_NORMAL_PRIORITY_CLASS", 0x4000)), ("setpriority", 8, 10)]


def test_the_job_reports_its_peak_and_its_limit():
    k = FakeKernel32()
    ops = winjob.JobOps(k)
    ops.set_limits("JOB", memory_bytes=256 << 20, priority_class=None)
    assert ops.memory_use("JOB") == (250 << 20, 256 << 20)
    assert winjob.hit_memory_limit(ops, "JOB")  # within a tenth of it: the allocation that failed was larger
    ops.set_limits("JOB", memory_bytes=None, priority_class=None)
    assert ops.memory_use("JOB") == (250 << 20, 0) and not winjob.hit_memory_limit(ops, "JOB")


@pytest.mark.parametrize("use, code, words", [
    ((255 << 20, 256 << 20), 1, "stopped by its memory cap of 256 MB"),
    ((100 << 20, 256 << 20), 1, None),   # far below its cap: some other failure
    ((255 << 20, 256 << 20), 0, None),   # it ended well
])
def test_on_windows_a_node_that_died_at_its_jobs_memory_limit_is_said_stopped_by_it(use, code, words):
    jobs = FakeJobOps()
    jobs.use = use
    keeper, _ = keeper_for(caps.choose(WINDOWS, "habc"), NodeCaps(memory_mb=256), platform="win32", jobs=jobs)
    child = FakeChild("n1", 3, job="JOB")
    keeper.place(child)
    assert keeper.exit_cause(child, code) == words


def test_v1_groups_are_ready_before_the_spawn_and_the_child_joins_them_itself():
    ops = v1_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops),
                           NodeCaps(cpu_percent=20, memory_mb=256))
    mem, cpu = MEM / "cadre-desktop-habc" / "n1", CPU / "cadre-desktop-habc" / "n1"
    assert sorted(keeper.before_spawn("n1")) == sorted([mem / "cgroup.procs", cpu / "cgroup.procs"])
    assert ops.files[mem / "memory.limit_in_bytes"] == str(256 << 20)  # the limits first, no process yet
    assert ops.files[cpu / "cpu.cfs_quota_us"] == "20000"
    assert mem / "cgroup.procs" not in ops.files
    keeper.place(FakeChild("n1", 4242))
    assert ops.files[mem / "cgroup.procs"] == ops.files[cpu / "cgroup.procs"] == "4242"  # again, after the spawn
    assert [p for p, _ in ops.writes].count(str(mem / "memory.limit_in_bytes")) == 1


def test_no_group_is_made_ready_for_a_node_without_caps_or_another_way():
    ops = v1_tree()
    keeper, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops), NodeCaps())
    assert keeper.before_spawn("n1") == [] and not ops.writes
    scoped, _ = keeper_for(caps.choose(LINUX, "habc", scope_address=lambda: "unix:path=/x",
                                       make_scope_ops=lambda _a: FakeScopeOps()), NodeCaps(memory_mb=64))
    assert scoped.before_spawn("n1") == []


def test_the_spawns_thread_lowers_a_childs_priority_right_after_its_exec_and_never_raises():
    low, low_priority = keeper_for(caps.Way("priority", why_not="test"), NodeCaps())
    lower = low.lower_soon("n1")  # read on the loop before the spawn; called on the spawn's thread
    lower(4242)
    assert low_priority.lowered == [4242]
    normal, normal_priority = keeper_for(caps.Way("priority", why_not="test"), NodeCaps(low_priority=False))
    normal.lower_soon("n1")(4243)
    assert normal_priority.lowered == []

    def refused(_pid: int) -> None:
        raise PermissionError("not ours")
    low_priority.lower = refused  # type: ignore[method-assign, assignment]
    low.lower_soon("n1")(4244)  # `place` says it; the start goes on


# -- what the OS holds for each child (issue 39, item 3) ----------------------------------------

def test_a_node_whose_group_cannot_be_made_is_said_not_enforced_and_why(caplog):
    """Regression: the node's group could not be made ("No such file or directory" under the cpu
    controller), it ran in the host's own group, and every view said its caps were enforced."""
    ops = v1_tree()
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops)
    ops.dirs.discard(CPU)  # the cpu controller's group went away under us
    node_caps_ = NodeCaps(cpu_percent=20, memory_mb=256)
    keeper, _ = keeper_for(way, node_caps_)
    keeper.place(FakeChild("n1", 4242))
    said = keeper.enforcement(node_caps_, "n1")
    assert said.enforced is False, said
    assert "memory and cpu caps not enforced for this node" in said.how and "no such directory" in said.how, said
    assert keeper.enforcement(node_caps_, "n2").enforced, "another node, placed fine or never, is said the same"


def test_a_child_its_groups_do_not_hold_is_said_not_enforced():
    """What a view says is what the OS holds: the group's own `cgroup.procs`, read back."""
    from tests.support.fake_caps import FakeCgroupOps

    class Ignoring(FakeCgroupOps):
        def write(self, path: Path, text: str) -> None:
            if path.name == "cgroup.procs" and path.parent.parent.parent == CPU:
                return  # the kernel took the write and put the pid nowhere
            super().write(path, text)
    base = v1_tree()
    ops = Ignoring(base.mountinfo(), base.own_cgroups(), [str(d) for d in base.dirs])
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops)
    node_caps_ = NodeCaps(cpu_percent=20, memory_mb=256)
    keeper, _ = keeper_for(way, node_caps_)
    keeper.place(FakeChild("n1", 4242))
    said = keeper.enforcement(node_caps_, "n1")
    assert not said.enforced and "cpu cap not enforced for this node" in said.how and "4242" in said.how, said
    assert keeper.enforcement(NodeCaps(memory_mb=256), "n1").enforced, "the memory group holds it"


def test_a_node_placed_in_its_groups_is_said_enforced_and_forgotten_at_remove():
    ops = v1_tree()
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops)
    node_caps_ = NodeCaps(cpu_percent=20, memory_mb=256)
    keeper, _ = keeper_for(way, node_caps_)
    keeper.place(FakeChild("n1", 4242))
    assert keeper.enforcement(node_caps_, "n1").enforced
    ops.dirs.discard(CPU)
    keeper.place(FakeChild("n1", 4343))  # the next start could not be placed: said so
    assert not keeper.enforcement(node_caps_, "n1").enforced
    asyncio.run(keeper.forget("n1"))
    assert keeper.enforcement(node_caps_, "n1").enforced, "a removed node's failure outlived it"


def test_a_scope_systemd_refuses_is_said_not_enforced_for_that_node():
    way = caps.choose(LINUX, "habc", scope_address=lambda: "unix:x", make_scope_ops=lambda _a: FakeScopeOps(fail=True))
    node_caps_ = NodeCaps(memory_mb=256)
    keeper, _ = keeper_for(way, node_caps_)

    async def run() -> None:
        keeper.place(FakeChild("n1", 77))
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(run())
    said = keeper.enforcement(node_caps_, "n1")
    assert not said.enforced and "AccessDenied" in said.how, said


def test_doctor_says_caps_not_enforced_when_a_trial_group_cannot_be_made():
    ops = v1_tree()
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops)
    assert caps.describe(way)["enforced"] is True
    assert not any(p.name == "cadre-desktop-habc" for p in ops.dirs), "doctor's trial group was left behind"
    ops.dirs.discard(CPU)
    said = caps.describe(way)
    assert said["enforced"] is False and "could not be made" in str(said["how"]), said


def test_caps_set_while_a_capless_child_runs_are_not_enforced_until_its_next_start():
    ops = v1_tree()
    way = caps.choose(LINUX, "habc", scope_address=no_manager, cgroup_ops=ops)
    keeper, _ = keeper_for(way, NodeCaps())
    keeper.place(FakeChild("n1", 11))
    assert keeper.enforcement(NodeCaps(), "n1").enforced, "no cap: nothing to enforce"
    said = keeper.enforcement(NodeCaps(memory_mb=128), "n1")  # `node set` while it runs
    assert not said.enforced and "next start" in said.how, said
