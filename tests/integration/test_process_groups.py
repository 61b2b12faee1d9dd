"""The orchestrator owns every process a node starts (its log: tests/integration/test_log_keeper.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cadre_desktop.host.local import proctree
from cadre_desktop.host.local.handles import ExitEvent
from tests.support.lock_holder import HOLD_LOCK
from tests.support.polling import async_wait_until, wait_until
from tests.support.processes import THIS_OS, gone
from tests.support.real_orchestrator import make_orchestrator, ready_info


async def wrapper_and_node(tmp_path, cleanup, monkeypatch, stop_timeout_s: float = 2.0, grandchild: str = ""):
    """An orchestrator whose child n1 started a grandchild in its group: a wrapper and its node."""
    monkeypatch.setenv("SLEEPER_MODE", "grandchild")
    monkeypatch.setenv("SLEEPER_GRANDCHILD", grandchild)
    orch = make_orchestrator(tmp_path, stop_timeout_s=stop_timeout_s)
    await orch.init()
    handle = await orch.spawn("n1", {})
    cleanup.append(handle.pid)
    pid = ready_info(orch, "n1")["grandchild"]
    cleanup.append(pid)
    return orch, handle, pid


async def test_a_leaders_death_ends_its_group_before_the_exit_is_reported(tmp_path, cleanup, monkeypatch):
    orch, handle, grandchild = await wrapper_and_node(tmp_path, cleanup, monkeypatch)
    seen: list[tuple[ExitEvent, bool]] = []
    # At the moment listeners hear of the exit (and would respawn), the kill is already sent.
    orch.subscribe(lambda event: seen.append((event, THIS_OS.group_exists(handle.pgid))))
    os.kill(handle.pid, signal.SIGKILL)  # the wrapper dies; the real node would live on
    await async_wait_until(lambda: seen, what="the exit event")
    await async_wait_until(lambda: gone(grandchild), timeout=5, what="the grandchild's end")
    assert not seen[0][0].requested
    orch.close()


async def test_stop_gives_the_whole_group_its_grace_then_kills_what_ignores_it(tmp_path, cleanup, monkeypatch):
    orch, handle, grandchild = await wrapper_and_node(tmp_path, cleanup, monkeypatch, 0.5, "ignore-term")
    await orch.stop(handle.id)  # the leader leaves on SIGTERM; its child stays until killed
    assert gone(handle.pid) and gone(grandchild)
    orch.close()


async def test_a_restarted_host_ends_what_a_leader_that_died_meanwhile_left(tmp_path, cleanup, monkeypatch):
    first, handle, grandchild = await wrapper_and_node(tmp_path, cleanup, monkeypatch)
    first.close()  # the host goes away; then the wrapper is killed while nobody watches
    os.kill(handle.pid, signal.SIGKILL)
    wait_until(lambda: gone(handle.pid), what="the leader's death")
    assert not gone(grandchild)

    second = make_orchestrator(tmp_path)
    report = await second.init()
    assert report.attached == [] and second.get(handle.id) is None  # the dead child is forgotten
    assert gone(grandchild), "the orphan of the dead wrapper was left running"
    second.close()


async def test_remove_and_quit_end_a_stray_that_left_the_group(tmp_path, cleanup, monkeypatch):
    monkeypatch.setenv("SLEEPER_MODE", "grandchild")
    monkeypatch.setenv("SLEEPER_GRANDCHILD", "setsid")
    orch = make_orchestrator(tmp_path)
    await orch.init()
    strays = {}
    for node_id in ("n1", "n2"):
        handle = await orch.spawn(node_id, {})
        cleanup.append(handle.pid)
        strays[node_id] = ready_info(orch, node_id)["grandchild"]
        cleanup.append(strays[node_id])
        wait_until(lambda: (info := THIS_OS.process_info(strays[node_id])) is not None and info.sid == strays[node_id],
                   what="setsid")
    await orch.remove_node("n1")
    assert gone(strays["n1"]), "remove deleted the folder of a process that still runs"
    assert not orch.paths.node_dir("n1").exists()
    assert not gone(strays["n2"])
    await orch.stop_all()
    assert gone(strays["n2"]), "quit left a node process running"
    orch.close()


async def test_a_stray_holding_the_work_folders_lock_is_ended_before_a_spawn(tmp_path, cleanup, caplog):
    orch = make_orchestrator(tmp_path)
    await orch.init()
    work = orch.paths.node_dir("n1")
    work.mkdir(parents=True)
    env = {**os.environ, "CADRE_NODE_ID": "n1", "CADRE_NODE_DIR": str(work)}
    stray = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(work / proctree.LOCK_FILE)],
                             env=env, stdout=subprocess.PIPE, start_new_session=True)
    cleanup.append(stray.pid)
    assert stray.stdout is not None
    assert stray.stdout.readline().strip() == b"locked"
    handle = await orch.spawn("n1", {})
    cleanup.append(handle.pid)
    assert stray.wait(5) == -signal.SIGKILL
    assert f"stray process {stray.pid}" in caplog.text and "lock" in caplog.text
    ready_info(orch, "n1")
    await orch.stop(handle.id)
    orch.close()


async def test_a_child_whose_log_keeper_cannot_start_is_ended_and_the_spawn_fails_clearly(tmp_path, monkeypatch):
    from cadre_desktop.errors import SpawnError
    from cadre_desktop.host.local import keeper
    from cadre_desktop.host.local.ports import port_is_free

    orch = make_orchestrator(tmp_path)
    await orch.init()
    started: list[int] = []
    real_popen = __import__("subprocess").Popen

    def popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr("cadre_desktop.host.local.launch.subprocess.Popen", popen)
    monkeypatch.setattr(keeper, "keeper_command", lambda *_: [str(tmp_path / "no-such-keeper")])
    with pytest.raises(SpawnError, match="log keeper"):
        await orch.spawn("n1", {})
    assert started, "no node was started"
    wait_until(lambda: all(gone(pid) for pid in started), timeout=5,
               what="the node started for the failed spawn to end (reaped on a thread)")
    assert orch.list_nodes() == []
    free = [p for p in range(orch.ports.low, orch.ports.high + 1) if port_is_free("127.0.0.1", p)]
    assert orch.ports.allocate(2) == free[:2], "the failed spawn left its ports held"
    orch.close()


async def test_quit_stops_every_node_in_one_grace_and_writes_state_once(tmp_path, cleanup, monkeypatch):
    """Terminates go out to every group before any wait; the nodes that ignore it share one
    grace and are killed together; state.json is written once, naming every node stopped."""
    from cadre_desktop.host.local import handles as handles_module  # where the state file is written
    from cadre_desktop.host.local.handles import read_state

    monkeypatch.setenv("SLEEPER_MODE", "ignore-term")
    orch = make_orchestrator(tmp_path, stop_timeout_s=0.3)
    await orch.init()
    handles = [await orch.spawn(f"n{i}", {}) for i in range(4)]
    for h in handles:
        cleanup.append(h.pid)
        ready_info(orch, h.node_id)
    signals: list[tuple[str, bool]] = []
    real_signal = orch.ender.signal
    writes: list[tuple] = []
    real_write = handles_module.write_state

    def record_signal(handle, *, kill):
        signals.append((handle.node_id, kill))
        real_signal(handle, kill=kill)

    monkeypatch.setattr(orch.ender, "signal", record_signal)

    def record_write(*a, **k):
        writes.append(a)
        real_write(*a, **k)
    monkeypatch.setattr(handles_module, "write_state", record_write)
    await orch.stop_all()
    assert [kill for _, kill in signals] == [False] * 4 + [True] * 4, signals
    assert all(gone(h.pid) and h.log_kept and h._log_done.is_set() for h in handles), \
        "quit left a node, or did not wait for its last output"
    assert len(writes) == 1, f"state.json written {len(writes)} times"
    persisted, stopped = read_state(orch.state_file)
    assert persisted == {} and stopped == {h.node_id for h in handles}
    orch.close()
