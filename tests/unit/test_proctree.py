"""What a node owns beyond its leader: each platform's branch, with real processes where Linux has them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadre_desktop.host.local import proctree
from cadre_desktop.host.local.handles import STATE_VERSION, Handle, read_state
from cadre_desktop.host.local.system import procs, winjob
from cadre_desktop.host.local.system.linux import LinuxOS
from cadre_desktop.host.local.system.posix import PosixOS
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.host.local.system.windows import WindowsOS
from cadre_desktop.host.local.teardown import Ender
from tests.support.lock_holder import HOLD_LOCK
from tests.support.polling import wait_until

#: Each platform's seam (Windows' on Linux: its process calls are psutil's or faked).
SEAMS: dict[str, ProcessOS] = {"linux": LinuxOS(), "darwin": PosixOS(), "win32": WindowsOS()}
LINUX = SEAMS["linux"]


def node_env(nodes: Path, node_id: str) -> dict[str, str]:
    return {**os.environ, "CADRE_NODE_ID": node_id, "CADRE_NODE_DIR": str(nodes / node_id)}


@pytest.fixture
def spawned():
    made: list[subprocess.Popen] = []

    def start(args, **kw) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, **kw)
        made.append(proc)
        return proc

    yield start
    for proc in made:
        proc.kill()
        proc.wait()


# -- the process table, per platform ---------------------------------------------------------

@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_process_table_gives_group_and_session_on_each_posix_branch(platform, spawned):
    child = spawned(["import time; time.sleep(60)"], start_new_session=True)
    system = SEAMS[platform]
    info = system.process_info(child.pid)
    assert info is not None and info.pid == info.pgid == info.sid == child.pid
    listed = {p.pid: p for p in system.process_table()}
    assert listed[child.pid].pgid == child.pid
    assert info.identity.matches(system.read_identity(child.pid))


def test_windows_has_no_process_groups_to_signal_and_its_table_follows_parents(spawned):
    windows = SEAMS["win32"]
    assert windows.process_info(os.getpid()) is None
    assert not windows.group_exists(os.getpid()) and not windows.group_alive(os.getpid())
    child = spawned(["import time; time.sleep(60)"])
    listed = {p.pid: p for p in windows.process_table()}
    assert listed[child.pid].pgid == listed[child.pid].sid == os.getpid(), "its parent stands in for its group"


def test_a_group_with_members_exists_and_an_ended_one_does_not(spawned):
    child = spawned(["import time; time.sleep(60)"], start_new_session=True)
    assert LINUX.group_exists(child.pid) and LINUX.group_alive(child.pid)
    child.kill()
    child.wait()
    assert not LINUX.group_exists(child.pid) and not LINUX.group_alive(child.pid)


def test_a_group_of_only_zombies_is_not_alive(spawned):
    # The zombie stays unreaped (and in its group) until child.wait() below.
    child = spawned(["pass"], start_new_session=True)
    wait_until(lambda: LINUX.read_identity(child.pid) is None, what="zombie")
    assert LINUX.group_exists(child.pid)
    assert not LINUX.group_alive(child.pid)


# -- sorting a home's node processes ---------------------------------------------------------

def member(pid, pgid, sid, node_id, start="1"):
    return proctree.Member(procs.ProcInfo(pid, pgid, sid, procs.Identity(start)), node_id)


def test_census_keeps_tracked_groups_adopts_one_lost_leader_and_calls_the_rest_leftovers(monkeypatch, tmp_path):
    found = [
        member(100, 100, 100, "a"),            # tracked leader
        member(101, 100, 100, "a"),            # its wrapped node: part of it
        member(200, 150, 150, "b", "5"),       # a dead wrapper's orphan: leftover
        member(300, 300, 300, "c", "7"),       # a leader nobody tracks: adopt
        member(301, 301, 301, "c", "9"),       # a second one for c: leftover
        member(400, 400, 400, "a", "3"),       # a session escaped from a's tracked group: leftover
    ]
    monkeypatch.setattr(proctree, "members", lambda *a, **k: found)
    census = proctree.take_census(tmp_path, {100: "a"}, LINUX)
    assert [m.pid for m in census.untracked] == [300]
    assert sorted(m.pid for m in census.leftovers) == [200, 301, 400]


def test_census_on_windows_follows_parents_since_there_are_no_groups(monkeypatch, tmp_path):
    # On Windows pgid and sid stand for the parent pid.
    found = [
        member(10, 1, 1, "a"),        # tracked leader
        member(11, 10, 10, "a"),      # its child
        member(12, 11, 11, "a"),      # its grandchild
        member(20, 2, 2, "b"),        # untracked top process of b: adopt
        member(21, 99, 99, "b"),      # another top process of b: leftover
    ]
    monkeypatch.setattr(proctree, "members", lambda *a, **k: found)
    census = proctree.take_census(tmp_path, {10: "a"}, SEAMS["win32"])
    assert [m.pid for m in census.untracked] == [20]
    assert [m.pid for m in census.leftovers] == [21]


def test_members_are_found_by_the_environment_only_under_our_nodes_folder(tmp_path, spawned):
    nodes = tmp_path / "nodes"
    ours = spawned(["import time; time.sleep(60)"], env=node_env(nodes, "n1"))
    spawned(["import time; time.sleep(60)"], env=node_env(tmp_path / "elsewhere", "n1"))
    spawned(["import time; time.sleep(60)"], env={**node_env(nodes, "n1"), "CADRE_NODE_ID": "n2"})
    wait_until(lambda: procs.environment(ours.pid).get("CADRE_NODE_ID") == "n1", what="child env")
    assert [m.pid for m in proctree.members(nodes, LINUX, node_id="n1")] == [ours.pid]


def test_group_leftovers_are_never_taken_from_a_reused_leader_pid(tmp_path, spawned):
    nodes = tmp_path / "nodes"
    leader = spawned(["import time; time.sleep(60)"], start_new_session=True, env=node_env(nodes, "n1"))
    real = LINUX.read_identity(leader.pid)
    assert real is not None  # a live child has one
    wait_until(lambda: procs.environment(leader.pid).get("CADRE_NODE_ID") == "n1", what="child env")
    assert proctree.group_leftovers(leader.pid, real, "n1", nodes, LINUX) == [leader.pid]
    other = procs.Identity(str(int(real.start_time) - 5), real.boot_id)
    assert proctree.group_leftovers(leader.pid, other, "n1", nodes, LINUX) == []
    assert proctree.group_leftovers(leader.pid, real, "n1", nodes, SEAMS["win32"]) == []


# -- the work folder's lock --------------------------------------------------------------------

def test_lock_holder_is_named_only_when_it_runs_for_the_node(tmp_path, spawned):
    nodes = tmp_path / "nodes"
    work = nodes / "n1"
    work.mkdir(parents=True)
    assert proctree.lock_holder(work, "n1", LINUX) is None  # no lock file at all
    holder = spawned([HOLD_LOCK, str(work / proctree.LOCK_FILE)], env=node_env(nodes, "n1"))
    assert holder.stdout.readline().strip() == b"locked"
    assert proctree.lock_holder(work, "n1", LINUX) == holder.pid
    assert proctree.lock_holder(work, "n2", LINUX) is None  # not that node's process
    assert proctree.lock_holder(work, "n1", SEAMS["win32"]) is None  # Windows: no such lock
    holder.kill()
    holder.wait()
    assert proctree.lock_holder(work, "n1", LINUX) is None


def test_lock_of_a_stranger_is_not_attributed(tmp_path, spawned):
    work = tmp_path / "nodes" / "n1"
    work.mkdir(parents=True)
    stranger = spawned([HOLD_LOCK, str(work / proctree.LOCK_FILE)])
    assert stranger.stdout.readline().strip() == b"locked"
    assert proctree.lock_holder(work, "n1", LINUX) is None


# -- Windows: a Job object per child -------------------------------------------------------------

class FakeKernel32:
    def __init__(self, fail: str = ""):
        self.calls: list[tuple] = []
        self.fail = fail
        self.jobs: dict[str, int] = {}

    def CreateJobObjectW(self, attrs, name):
        self.calls.append(("create", name))
        if self.fail == "create":
            return 0
        self.jobs[name] = 100 + len(self.jobs)
        return self.jobs[name]

    def SetInformationJobObject(self, job, klass, info, size):
        limits = info._obj.BasicLimitInformation.LimitFlags
        self.calls.append(("limits", job, klass, limits, size))
        return self.fail != "limits"

    def AssignProcessToJobObject(self, job, process):
        self.calls.append(("assign", job, process))
        return self.fail != "assign"

    def OpenJobObjectW(self, access, inherit, name):
        self.calls.append(("open", access, name))
        return self.jobs.get(name, 0)

    def TerminateJobObject(self, job, code):
        self.calls.append(("terminate", job, code))
        return 1

    def CloseHandle(self, handle):
        self.calls.append(("close", handle))
        return 1


def test_windows_child_goes_into_a_kill_on_close_job_that_a_later_host_reopens():
    k = FakeKernel32()
    ops = winjob.JobOps(k)
    name = winjob.job_name("n1.abcd1234")
    job = winjob.prepare(ops, name)
    assert winjob.assign(ops, job, 555) == job
    assert k.calls[0] == ("create", "Local\\cadre-desktop-n1.abcd1234")
    limits = k.calls[1]
    assert limits[2] == winjob.JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS
    assert limits[3] == winjob.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    assert limits[4] == __import__("ctypes").sizeof(winjob.ExtendedLimits)
    assert k.calls[2] == ("assign", job, 555)
    again = winjob.reopen(ops, name)
    assert again == job and k.calls[-1][0] == "open"
    assert winjob.end(ops, again) and k.calls[-1] == ("terminate", job, winjob.TERMINATED_EXIT_CODE)
    assert winjob.reopen(ops, None) is None
    assert not winjob.end(ops, None)


@pytest.mark.parametrize("step", ["create", "limits", "assign"])
def test_windows_job_failures_leave_the_child_without_a_job_and_close_what_was_made(step):
    k = FakeKernel32(fail=step)
    ops = winjob.JobOps(k)
    job = winjob.prepare(ops, "Local\\x")
    job = winjob.assign(ops, job, 7)
    assert job is None
    made = [c for c in k.calls if c[0] == "create"]
    if step != "create":
        assert k.calls[-1][0] == "close", "a half-made job is closed"
    assert made


async def test_windows_stop_kill_and_leader_death_end_the_job(tmp_path):
    k = FakeKernel32()
    windows = WindowsOS(job_ops=lambda: winjob.JobOps(k))
    ender = Ender(tmp_path, windows)
    job = winjob.prepare(windows.jobs(), "Local\\j")
    handle = Handle("n1.x", "n1", 42, procs.Identity("1"), 1, 2, "", job="Local\\j")
    handle._job_handle = job
    ender.signal(handle, kill=True)
    assert k.calls[-1] == ("terminate", job, winjob.TERMINATED_EXIT_CODE)
    k.calls.clear()
    ender.end_now(handle)
    assert k.calls == [("terminate", job, winjob.TERMINATED_EXIT_CODE)]
    k.calls.clear()
    handle._job_handle = None
    await ender.end_leftovers(handle)  # a restarted host: reopened by name
    assert [c[0] for c in k.calls] == ["open", "terminate"]


@pytest.mark.parametrize("platform", ["linux", "darwin"])
async def test_posix_leader_death_kills_what_is_left_of_its_group(platform, spawned):
    wrapper = spawned(
        ["import subprocess, sys\n"
         "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
         "print(c.pid, flush=True)\n"
         "import time; time.sleep(60)"],
        start_new_session=True,
    )
    grandchild = int(wrapper.stdout.readline())
    identity = SEAMS[platform].read_identity(wrapper.pid)
    assert identity is not None  # a live child has one
    handle = Handle("n1.x", "n1", wrapper.pid, identity, 1, 2, "",
                    pgid=wrapper.pid)
    wrapper.kill()
    wrapper.wait()
    ender = Ender(Path("/nonexistent"), SEAMS[platform])
    assert not ender.group_gone(handle)
    ender.end_now(handle)
    wait_until(lambda: LINUX.read_identity(grandchild) is None, timeout=5, what="the grandchild's end")
    assert ender.group_gone(handle)


# -- state.json ----------------------------------------------------------------------------------

def test_version_1_state_is_upgraded_with_the_pid_as_group(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "handles": {"n1.a": {
        "node_id": "n1", "pid": 4321, "start_time": "9", "boot_id": "b", "api_port": 1, "p2p_port": 2,
        "started_at": ""}}}))
    handles, _ = read_state(path)
    assert handles["n1.a"].pgid == 4321
    assert handles["n1.a"].pump_pid is None and handles["n1.a"].job is None
    assert STATE_VERSION == 2


def test_state_rows_keep_group_job_and_pump(tmp_path):
    from cadre_desktop.host.local.handles import write_state

    handle = Handle("n1.a", "n1", 10, procs.Identity("5", "boot"), 1, 2, "t", pgid=10, job="Local\\j",
                    pump_pid=11, pump_identity=procs.Identity("6", "boot"))
    write_state(tmp_path / "state.json", [handle])
    again = read_state(tmp_path / "state.json")[0]["n1.a"]
    assert (again.pgid, again.job, again.pump_pid) == (10, "Local\\j", 11)
    assert again.pump_identity == procs.Identity("6", "boot")


@pytest.mark.parametrize("row", [{"pgid": "10"}, {"pgid": 0}, {"pump": {"pid": "x"}}, {"job": 5}])
def test_state_rows_with_bad_new_fields_are_refused(tmp_path, row):
    from cadre_desktop.errors import StorageError

    base = {"node_id": "n1", "pid": 10, "start_time": "9", "api_port": 1, "p2p_port": 2}
    (tmp_path / "state.json").write_text(json.dumps({"version": 2, "handles": {"h": {**base, **row}}}))
    with pytest.raises(StorageError, match="bad row"):
        read_state(tmp_path / "state.json")
