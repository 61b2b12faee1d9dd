"""A start is awaited (issue 26: the storm's loop lag): the loop goes on while a child comes up,
and what lands meanwhile (a Remove, a hold) never leaves a child the records do not name."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime

from cadre_desktop.host.core.records.lifecycle import Change
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.host.core.supervision.holds import person_hold
from cadre_desktop.host.local.system import procs
from tests.support.polling import async_wait_until
from tests.support.real_orchestrator import make_orchestrator


async def test_the_loop_runs_while_a_start_is_in_flight(tmp_path, monkeypatch):
    orch = make_orchestrator(tmp_path / "home")
    await orch.init()
    entered, go_on = threading.Event(), threading.Event()
    real_spawn = procs.spawn

    def slow_spawn(*args, **kwargs):  # a Popen that waits for its CPU, as in a storm
        entered.set()
        assert go_on.wait(10), "the test never let the spawn go on"
        return real_spawn(*args, **kwargs)

    monkeypatch.setattr(procs, "spawn", slow_spawn)
    start = asyncio.create_task(orch.start("n1", 1, {}))
    handle = None
    try:
        await async_wait_until(entered.is_set, what="the spawn under way")
        ran = asyncio.Event()
        asyncio.get_running_loop().call_soon(ran.set)
        async with asyncio.timeout(5):
            await ran.wait()  # on the old code the loop was inside Popen: this never ran before it ended
        assert not start.done(), "the start ended while its spawn was still held"
        go_on.set()
        async with asyncio.timeout(10):
            handle = await start
        assert orch.is_running(handle.id) and orch.system.read_identity(handle.pid) is not None
    finally:
        go_on.set()
        if handle is not None:
            await orch.stop(handle.id)
        orch.close()


async def test_a_node_removed_while_its_start_is_in_flight_keeps_no_child(rig):
    rig.node()  # its child died: the pass starts it again
    rig.orch.hold_starts = asyncio.Event()
    pass_ = asyncio.create_task(rig.sup.reconcile())
    await async_wait_until(lambda: "n1" in rig.orch.in_flight, what="the start in flight")
    removal = asyncio.create_task(rig.service.remove("n1"))
    rig.orch.hold_starts.set()
    started, removed = await asyncio.gather(pass_, removal)
    assert started == [] and removed is True
    assert rig.rec() is None
    assert not [h for h in rig.orch.machine.instances.values() if h.node_id == "n1" and h.alive]


async def test_a_node_paused_while_its_start_is_in_flight_gets_no_child_and_spends_nothing(rig):
    before = rig.node(attempts=1, ago_s=600)
    rig.orch.hold_starts = asyncio.Event()
    pass_ = asyncio.create_task(rig.sup.reconcile())
    await async_wait_until(lambda: "n1" in rig.orch.in_flight, what="the start in flight")
    # A hold written off the serial queue while the child comes up (the record changed under the start).
    rig.lifecycle.apply("n1", Change.PAUSE, lambda r: r.replace(
        status=NodeStatus.PAUSED, hold=person_hold(datetime.now().astimezone(), None)))
    rig.orch.hold_starts.set()
    assert await pass_ == []
    after = rig.present_rec()
    assert after.status is NodeStatus.PAUSED
    assert after.handle == before.handle and after.attempts == 1, "the let-go start was written or counted"
    new = [h for h in rig.orch.handles_for("n1") if h.id != before.handle]
    assert len(new) == 1 and not new[0].alive and new[0].id in rig.orch.stopped, "the new child was left running"
    assert new[0].id not in rig.sup.starter.host_tokens


async def test_a_start_that_lands_after_a_give_up_is_stopped_and_the_error_stays(rig):
    rig.node(attempts=1, ago_s=600)
    rig.orch.hold_starts = asyncio.Event()
    pass_ = asyncio.create_task(rig.sup.reconcile())
    await async_wait_until(lambda: "n1" in rig.orch.in_flight, what="the start in flight")
    rig.lifecycle.apply("n1", Change.GIVE_UP, lambda r: r.replace(status=NodeStatus.ERROR, error="given up"))
    rig.orch.hold_starts.set()
    assert await pass_ == []
    assert rig.present_rec().status is NodeStatus.ERROR
    assert not [h for h in rig.orch.handles_for("n1") if h.alive]
