"""Warm starts: the orchestrator hands a loaded standby of the reference node to the next start."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest

from cadre_desktop.host.local import standby as standby_module
from cadre_desktop.host.local.handles import ExitEvent
from cadre_desktop.settings import Settings, default_node_command
from tests.support.polling import async_wait_until
from tests.support.real_orchestrator import port_range
from tests.support.warm import REFERENCE, cmdline, gone, hanging, make, program, ready_standby, status

pytestmark = pytest.mark.skipif(os.name != "posix", reason="standbys are POSIX only")

@pytest.fixture
def orch(tmp_path):
    made = make(tmp_path)
    yield made
    if made.standby is not None:
        made.standby.close()
    for handle in made.list_nodes():
        try:
            os.killpg(handle.pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def handing_over(monkeypatch):
    """Standbys handed over whole (the way on hosts that cannot adopt orphans), not fork servers."""
    monkeypatch.setattr(standby_module, "FORK", False)


async def test_a_start_takes_the_loaded_standby_and_another_is_loaded(handing_over, orch):
    await orch.init()
    pid = await ready_standby(orch)
    secret = secrets.token_urlsafe(32)
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secret})
    assert handle.pid == pid, "the start did not take the standby"
    await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the node answering")
    answer = status(handle.api_port)
    assert answer is not None and answer["node_id"] == "n1"
    await ready_standby(orch, other_than=pid)
    # The secret went through the pipe: not in the command line, not in the exec-time environment.
    proc = psutil.Process(pid)
    assert secret not in " ".join(proc.cmdline()) and secret not in json.dumps(proc.environ())
    from cadre_desktop.host.local import proctree

    assert [m.pid for m in proctree.members(orch.nodes_dir, orch.system, node_id="n1")] == [pid], \
        "the host cannot find the node born of a standby among its processes"
    log_text = orch.paths.node_log("n1").read_text()
    assert "starting node n1" in log_text and "listening on" in log_text and secret not in log_text
    await orch.stop_all()


async def test_a_standby_never_answers_as_a_node_before_it_is_told_who_it_is(orch):
    await orch.init()
    pid = await ready_standby(orch)
    proc = psutil.Process(pid)
    assert not proc.net_connections(kind="inet"), "a standby opened a port"
    assert not any(k.startswith("CADRE_") and k != "CADRE_STANDBY" for k in proc.environ())
    assert not any(orch.nodes_dir.iterdir()) if orch.nodes_dir.exists() else True  # no work folder touched


async def test_a_standby_that_dies_is_replaced_quietly_and_counts_for_no_node(orch, monkeypatch):
    monkeypatch.setattr(standby_module, "FIRST_PAUSE_S", 0.05)
    exits: list[ExitEvent] = []
    orch.subscribe(exits.append)
    await orch.init()
    pid = await ready_standby(orch)
    os.kill(pid, signal.SIGKILL)
    await ready_standby(orch, other_than=pid)
    assert exits == [] and orch.list_nodes() == []


async def test_a_program_that_cannot_stand_by_is_started_cold(tmp_path, monkeypatch):
    monkeypatch.setattr(standby_module, "FIRST_PAUSE_S", 0.02)
    orch = make(tmp_path, [sys.executable, "-c", "import sys; sys.exit(2)"])
    await orch.init()
    pool = orch.standby
    assert pool is not None
    await async_wait_until(lambda: not pool.enabled, timeout=10, what="the pool giving up")
    assert pool.ready is None
    orch.close()


async def test_quit_and_close_leave_no_standby(tmp_path, orch):
    await orch.init()
    pid = await ready_standby(orch)
    await orch.stop_all()
    assert gone(pid), "quit left the standby running"
    other = make(tmp_path / "b")
    await other.init()
    second = await ready_standby(other)
    other.close()  # the host leaves, its nodes stay; the standby goes with the host
    # The kill is sent at once and reaped on a thread: its end is waited for, with a deadline.
    await async_wait_until(lambda: gone(second), timeout=5, what="closing the host ending the standby")


def test_warm_standby_is_on_for_the_reference_node_only_unless_set():
    assert Settings(node_command=default_node_command()).uses_warm_standby()
    assert not Settings(node_command=["/opt/other-node"]).uses_warm_standby()
    assert Settings(node_command=["/opt/other-node"], warm_standby=True).uses_warm_standby()
    assert not Settings(warm_standby=False).uses_warm_standby()


@pytest.mark.parametrize("line, code", [(b"", 0), (b"not json\n", 2), (b'{"env": {"PATH": "/x"}}\n', 2)])
def test_a_standby_leaves_quietly_on_eof_and_refuses_a_bad_line(tmp_path, line, code):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    env["CADRE_STANDBY"] = "1"
    out = subprocess.run(REFERENCE, input=line, env=env, cwd=tmp_path, capture_output=True, timeout=30)
    assert out.returncode == code, out.stderr
    assert b"Traceback" not in out.stderr


async def test_ready_in_counts_from_the_start_not_from_when_the_standby_was_loaded(handing_over, orch):
    """Regression: a standby loaded minutes earlier logged "ready in 79863 ms" for a sub-second start."""
    import re
    import time

    await orch.init()
    pid = await ready_standby(orch)
    loaded = psutil.Process(pid).create_time()
    await async_wait_until(lambda: time.time() - loaded > 3.0, timeout=15, what="the standby loaded for 3 s")
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    assert handle.pid == pid
    log_path = orch.paths.node_log("n1")
    await async_wait_until(lambda: log_path.exists() and "ready in" in log_path.read_text(), timeout=15,
                           what="the node's ready line")
    found = re.search(r"ready in (\d+) ms", orch.paths.node_log("n1").read_text())
    assert found is not None
    ready_ms = float(found[1])
    assert ready_ms < 2000, f"ready in {ready_ms} ms counts the standby's wait"
    await orch.stop_all()


async def test_a_changed_node_program_is_the_one_the_next_start_runs(tmp_path, orch):
    """Settings name another program while the host runs: the old standby goes, the new one starts."""
    from cadre_desktop.host.local.config import LocalConfig as DriverConfig

    await orch.init()
    old = await ready_standby(orch)
    new_program = program(tmp_path, "new_node")
    orch.reconfigure(DriverConfig(node_command=tuple(new_program), port_range=port_range(tmp_path), stop_timeout_s=2.0,
                                  warm_standby=True))
    await async_wait_until(lambda: gone(old), timeout=10, what="the old program's standby ended")
    pid = await ready_standby(orch, other_than=old)
    assert "new_node.py" in cmdline(pid)
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    assert "new_node.py" in cmdline(handle.pid), "the start ran the old node program"
    await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the node answering")
    orch.reconfigure(DriverConfig(node_command=tuple(REFERENCE), port_range=port_range(tmp_path), stop_timeout_s=2.0,
                                  warm_standby=False))
    assert orch.standby is None  # warm starts turned off while running
    orch.reconfigure(DriverConfig(node_command=tuple(REFERENCE), port_range=port_range(tmp_path), stop_timeout_s=2.0,
                                  warm_standby=True))
    assert "cadre_desktop.node" in cmdline(await ready_standby(orch)), "warm starts turned on found no standby"
    await orch.stop_all()


async def test_a_stopped_standby_is_not_handed_a_node_and_the_start_goes_on_cold(orch):
    await orch.init()
    pid = await ready_standby(orch)
    os.kill(pid, signal.SIGSTOP)
    await async_wait_until(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, timeout=5,
                           what="the standby stopped")
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    assert handle.pid != pid and handle.attempt == 1
    await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the cold start answering")
    await async_wait_until(lambda: gone(pid), timeout=10, what="the stopped standby ended")
    await orch.stop_all()


async def test_a_standby_that_never_takes_its_node_over_costs_the_start_nothing(tmp_path, monkeypatch):
    """It said ready, read its line, and hangs: the same start goes on cold within HANDOVER_S."""
    orch = make(tmp_path, hanging(tmp_path, "hanging_node", b"ready"))
    await orch.init()
    try:
        pid = await ready_standby(orch)
        started = time.monotonic()
        start = asyncio.create_task(orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)}))
        await async_wait_until(lambda: orch.spawner.busy("n1"), what="the hand-over under way")
        ran = asyncio.Event()
        asyncio.get_running_loop().call_soon(ran.set)
        async with asyncio.timeout(standby_module.HANDOVER_S / 2):
            await ran.wait()  # the hung hand-over waits on the start's thread, not on the loop
        assert time.monotonic() - started < standby_module.HANDOVER_S, "the loop waited for the hand-over"
        assert not start.done(), "the start ended before its standby's hand-over could have timed out"
        handle = await start
        took = time.monotonic() - started
        assert handle.pid != pid and took < standby_module.HANDOVER_S + 2, took
        await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the cold start answering")
        await async_wait_until(lambda: gone(pid), timeout=10, what="the hung standby ended")
        await orch.stop_all()
    finally:
        orch.close()


async def test_a_descriptor_shortage_never_turns_warm_starts_off(orch, monkeypatch):
    """Out of descriptors is the machine's trouble: the program is not taken to lack standby support."""
    from cadre_desktop.host.local.system import procs

    def no_descriptors(*args, **kwargs):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(procs, "spawn", no_descriptors)
    for _ in range(standby_module.GIVE_UP_AFTER + 2):
        orch.standby._fill()
    assert orch.standby.enabled and orch.standby.ready is None
    orch.standby.close()


async def test_a_burst_of_starts_keeps_more_standbys_for_a_while_then_one(handing_over, orch, monkeypatch):
    """A storm of exits: takes close together grow the pool (bounded by `burst`), loaded one at a
    time; once calm again the extra standbys are ended and one is kept."""
    monkeypatch.setattr(standby_module, "CALM_S", 3.0)
    await orch.init()
    pool = orch.standby
    started: list[Any] = []
    for i in range(3):  # three takes close together: wanted 1 -> 2 -> 4
        await ready_standby(orch, other_than=started[-1].pid if started else None)
        started.append(await orch.start(f"n{i}", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)}))
    assert pool.wanted == min(4, pool.burst) == 4
    await async_wait_until(lambda: pool.standbys == 4, timeout=60, what="four standbys loaded for the burst")
    extra = [s.popen.pid for s in pool._standbys[1:]]
    await async_wait_until(lambda: pool.standbys == 1 and pool.wanted == 1, timeout=15, what="the pool back to one")
    await async_wait_until(lambda: all(gone(pid) for pid in extra), timeout=10, what="the extra standbys ended")
    for handle in started:
        assert not gone(handle.pid), "ending the extra standbys touched a node"
