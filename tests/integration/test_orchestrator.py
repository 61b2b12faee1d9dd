"""The orchestrator against real child processes and real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from cadre_desktop.host.local.handles import ExitEvent
from tests.support.polling import async_wait_until, wait_until
from tests.support.processes import THIS_OS
from tests.support.real_orchestrator import make_orchestrator, ready_info

SECRET = "s3cret-claim-value-that-must-not-leak-0123456789"


@pytest.fixture
def cleanup_pids():
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


async def started(tmp_path, cleanup_pids, secret_env: dict | None = None, **options):
    """A started orchestrator with node n1's child up and ready: (orchestrator, handle, ready.json)."""
    orch = make_orchestrator(tmp_path, **options)
    await orch.init()
    handle = await orch.spawn("n1", secret_env or {})
    cleanup_pids.append(handle.pid)
    return orch, handle, ready_info(orch, "n1")


async def test_spawn_gives_the_child_the_node_environment_and_its_own_session(tmp_path, cleanup_pids):
    orch, handle, info = await started(tmp_path, cleanup_pids, {"CADRE_CLAIM_SECRET": SECRET})
    assert info["pid"] == handle.pid
    assert info["pgid"] == handle.pid  # a session of its own
    assert info["cwd"] == str(orch.paths.node_dir("n1"))
    assert {"CADRE_NODE_ID", "CADRE_NODE_DIR", "CADRE_API_HOST", "CADRE_API_PORT",
            "CADRE_P2P_PORT", "CADRE_ADVERTISE_HOST", "CADRE_CLAIM_SECRET"} <= set(info["vars"])
    assert int(info["api_port"]) == handle.api_port
    assert orch.is_running(handle.id)
    await orch.stop(handle.id)
    assert not orch.is_running(handle.id)


async def test_no_secret_in_ps_output_or_state_file(tmp_path, cleanup_pids):
    orch, handle, _ = await started(tmp_path, cleanup_pids, {"CADRE_CLAIM_SECRET": SECRET})
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    assert str(handle.pid) in ps
    assert SECRET not in ps
    state = (tmp_path / "state.json").read_text()
    assert SECRET not in state
    assert "n1" in state
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o600
    await orch.stop(handle.id)


async def test_sigkill_reaches_exit_listeners(tmp_path, cleanup_pids):
    orch = make_orchestrator(tmp_path)
    await orch.init()
    events: list[ExitEvent] = []
    orch.subscribe(events.append)
    handle = await orch.spawn("n1", {})
    cleanup_pids.append(handle.pid)
    ready_info(orch, "n1")
    os.kill(handle.pid, signal.SIGKILL)
    await async_wait_until(lambda: events, what="exit event")
    assert events[0].handle_id == handle.id
    assert events[0].returncode == -signal.SIGKILL
    assert not events[0].requested
    assert not orch.is_running(handle.id)
    # A dead child is no longer in state.json (written on a loop turn after the exit is told).
    await async_wait_until(lambda: handle.id not in json.loads((tmp_path / "state.json").read_text())["handles"],
                           what="state.json without the dead child")


async def test_second_orchestrator_reattaches_without_spawning(tmp_path, cleanup_pids):
    first = make_orchestrator(tmp_path)
    await first.init()
    handle = await first.spawn("n1", {})
    cleanup_pids.append(handle.pid)
    ready_info(first, "n1")
    first.close()  # the host goes away; the child stays

    second = make_orchestrator(tmp_path)
    report = await second.init()
    assert [h.id for h in report.attached] == [handle.id]
    assert second.is_running(handle.id)
    # Its uptime counts from its own start, not from this host's.
    again = second.get(handle.id)
    assert again is not None and again.started_at == handle.started_at
    assert not second.ports.try_reserve([handle.api_port]), "the re-attached child's port is handed out again"
    assert len(psutil.Process(handle.pid).children()) == 0  # still the same single child
    # Exit of a re-attached child (not ours to reap) is still noticed.
    events: list[ExitEvent] = []
    second.subscribe(events.append)
    os.kill(handle.pid, signal.SIGKILL)
    await async_wait_until(lambda: events, what="exit of re-attached child")
    assert events[0].handle_id == handle.id


async def test_handle_whose_pid_now_belongs_to_another_process_is_not_adopted(tmp_path):
    from cadre_desktop.host.local.handles import read_state

    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        ident = THIS_OS.read_identity(stranger.pid)
        assert ident is not None  # the stranger runs
        forged = {
            "version": 1,
            "handles": {
                "n1.forged": {
                    "node_id": "n1", "pid": stranger.pid, "start_time": str(int(ident.start_time) - 100),
                    "boot_id": ident.boot_id, "api_port": 47600, "p2p_port": 47601, "started_at": "",
                }
            },
        }
        (tmp_path / "state.json").write_text(json.dumps(forged))
        orch = make_orchestrator(tmp_path)
        report = await orch.init()
        assert report.attached == []
        assert orch.get("n1.forged") is None and read_state(orch.state_file)[0] == {}  # forgotten, on disk too
        assert not orch.is_running("n1.forged")
        await orch.stop("n1.forged")
        await orch.remove_node("n1")
        assert stranger.poll() is None, "an unrelated process was signalled"
    finally:
        stranger.kill()
        stranger.wait()


async def test_stop_kills_the_whole_group_even_when_term_is_ignored(tmp_path, cleanup_pids, monkeypatch):
    monkeypatch.setenv("SLEEPER_MODE", "ignore-term")
    orch = make_orchestrator(tmp_path, stop_timeout_s=0.3)
    await orch.init()
    events: list[ExitEvent] = []
    orch.subscribe(events.append)
    handle = await orch.spawn("n1", {})
    cleanup_pids.append(handle.pid)
    ready_info(orch, "n1")
    await orch.stop(handle.id)
    assert events and events[0].requested
    assert not psutil.pid_exists(handle.pid) or psutil.Process(handle.pid).status() == psutil.STATUS_ZOMBIE


async def test_stop_ends_grandchildren_too(tmp_path, cleanup_pids, monkeypatch):
    monkeypatch.setenv("SLEEPER_MODE", "grandchild")
    orch, handle, info = await started(tmp_path, cleanup_pids)
    grandchild = psutil.Process(info["grandchild"])
    await orch.stop(handle.id)
    grandchild.wait(timeout=5)
    assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE


def assert_only_held(orch, ports, why: str) -> None:
    """`ports` are held by the live child, and no other port of the range is held."""
    from cadre_desktop.host.local.ports import port_is_free

    assert not any(orch.ports.try_reserve([port]) for port in ports), "its ports are handed out again"
    free = [p for p in range(orch.ports.low, orch.ports.high + 1) if p not in ports and port_is_free("127.0.0.1", p)]
    assert orch.ports.allocate(2) == free[:2], why
    orch.ports.release(free[:2])


async def test_respawn_drops_the_stale_handle_and_keeps_ports(tmp_path, cleanup_pids):
    orch, first, _ = await started(tmp_path, cleanup_pids)
    os.kill(first.pid, signal.SIGKILL)
    await async_wait_until(lambda: not orch.is_running(first.id))
    (orch.paths.node_dir("n1") / "ready.json").unlink()
    second = await orch.spawn("n1", {}, want_ports=first.ports)
    cleanup_pids.append(second.pid)
    assert second.ports == first.ports
    assert [h.id for h in orch.list_nodes()] == [second.id]
    assert_only_held(orch, second.ports, "the stale handle left a port held")
    ready_info(orch, "n1")
    await orch.stop(second.id)


async def test_failed_launch_restores_the_dropped_handle(tmp_path, cleanup_pids):
    orch, first, _ = await started(tmp_path, cleanup_pids)
    orch.node_command = [str(tmp_path / "no-such-program")]
    with pytest.raises(Exception) as err:
        await orch.spawn("n1", {})
    assert "could not start the node program" in str(err.value)
    assert [h.id for h in orch.list_nodes()] == [first.id]
    assert_only_held(orch, first.ports, "the failed launch left a port held")
    await orch.stop(first.id)


async def test_remove_stops_the_child_and_deletes_its_work_folder(tmp_path, cleanup_pids):
    orch, handle, _ = await started(tmp_path, cleanup_pids)
    await orch.remove_node("n1")
    assert not orch.paths.node_dir("n1").exists()
    assert not orch.paths.node_log("n1").exists()
    assert orch.list_nodes() == []
    assert orch.ports.try_reserve(handle.ports), "its ports are still held"
    assert not psutil.pid_exists(handle.pid) or psutil.Process(handle.pid).status() == psutil.STATUS_ZOMBIE


async def test_child_output_goes_to_its_log(tmp_path, cleanup_pids):
    orch, handle, _ = await started(tmp_path, cleanup_pids, {"CADRE_CLAIM_SECRET": SECRET})
    log_file = orch.paths.node_log("n1")
    # The pump creates the log as it starts, which may be after the node is ready.
    wait_until(lambda: log_file.exists() and "sleeper: ready" in log_file.read_text(), what="log line")
    assert SECRET not in log_file.read_text()
    assert log_file.stat().st_mode & 0o777 == 0o600
    await orch.stop(handle.id)


async def test_malformed_state_file_refuses_and_stays_identical(tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(b'{"version": 1, "handles": {"x": {"pid": "nope"}}}')
    before = path.read_bytes()
    orch = make_orchestrator(tmp_path)
    with pytest.raises(Exception) as err:
        await orch.init()
    assert str(path) in str(err.value)
    assert path.read_bytes() == before


async def test_a_start_of_a_new_attempt_ends_the_live_instance_it_replaces(tmp_path, cleanup_pids):
    # The sleeper holds no lock on its work folder: only the driver can end the instance it replaces.
    orch = make_orchestrator(tmp_path)
    await orch.init()
    events: list[ExitEvent] = []
    orch.subscribe(events.append)
    first = await orch.start("n1", 1, {})
    cleanup_pids.append(first.pid)
    ready_info(orch, "n1")
    (orch.paths.node_dir("n1") / "ready.json").unlink()
    second = await orch.start("n1", 2, {})
    cleanup_pids.append(second.pid)
    ready_info(orch, "n1")
    await async_wait_until(lambda: not psutil.pid_exists(first.pid)
                           or psutil.Process(first.pid).status() == psutil.STATUS_ZOMBIE,
                           what="the replaced instance gone")
    assert [h.id for h in orch.list_nodes()] == [second.id] and orch.is_running(second.id)
    assert events == [], "the replaced instance was told as an exit"
    await orch.stop(second.id)
