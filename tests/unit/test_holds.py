"""Holds, each rule alone on the fake clock and the fake driver: a person's pause (no end, for a
while, until a time), resume from each hold (the seed's demand), a sleeper waking by the pass
timer, each run.json state a node may ask for, run.json files that are not taken, and holds
across a host restart."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import timedelta

import pytest

from cadre_desktop.errors import InputError, InvalidState
from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.core.ops.views import hold_fields
from cadre_desktop.host.core.records.records import SUPERVISED, HeldBy, NodeStatus
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.host.core.supervision.decide import Decision
from cadre_desktop.host.core.supervision.runfile import MAX_BYTES
from cadre_desktop.host.core.supervision.supervisor import secret_kind
from tests.support.polling import async_wait_until
from tests.support.rig import Rig


async def exit_with(rig: Rig, code: int, node_id: str = "n1") -> None:
    """The child of `node_id` exits on its own; the supervisor hears it and a pass has run."""
    rig.sup.start()  # exits are heard from the start on (idempotent)
    rig.orch.exit(rig.present_rec(node_id).handle, code=code)
    await rig.sup.reconcile()


def write_run(rig: Rig, doc, node_id: str = "n1") -> None:
    folder = rig.work / node_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))


# -- a person's pause ------------------------------------------------------------------------

async def test_pause_stops_the_child_cleanly_spends_nothing_and_never_starts_it(rig):
    rec = rig.node(live=True, attempts=2, ago_s=600)
    held = await rig.service.pause("n1")
    assert held.status is NodeStatus.PAUSED and held.hold.by is HeldBy.PERSON and held.hold.wake_at is None
    assert rig.orch.stopped == [rec.handle] and not rig.orch.is_running(rec.handle)
    for _ in range(3):
        await rig.sup.reconcile()
        await rig.clock.run_for(3600)
    assert rig.orch.spawned == [] and rig.rec().attempts == 2
    assert rig.sup.decisions.last["n1"]["decision"] == Decision.HELD.value
    assert EventKind.HELD in rig.kinds() and EventKind.GAVE_UP not in rig.kinds()
    assert hold_fields(rig.rec(), rig.sup) == {"wake_at": None, "held_by": "person", "hold_reason": "paused by a person"}


async def test_pause_for_sleeps_that_long_then_starts_again_uncounted(rig):
    rig.node(live=True, attempts=1, ago_s=600)
    held = await rig.service.pause("n1", for_ms=30_000)
    assert held.status is NodeStatus.SLEEPING
    assert hold_fields(held, rig.sup)["wake_at"] == iso(rig.clock.now() + timedelta(seconds=30))
    await rig.clock.run_for(29)
    await rig.sup.reconcile()
    assert rig.orch.spawned == []
    await rig.clock.run_for(1)
    await rig.sup.reconcile()
    assert rig.orch.spawns_of("n1") and rig.rec().status in SUPERVISED
    assert rig.rec().attempts == 1 and rig.rec().hold is None
    assert EventKind.RESUMED in rig.kinds()


async def test_pause_until_a_time_and_its_refusals(rig):
    rig.node(live=True)
    with pytest.raises(InputError, match="in the past"):
        await rig.service.pause("n1", until=rig.clock.now() - timedelta(seconds=1))
    with pytest.raises(InputError, match="not both"):
        await rig.service.pause("n1", for_ms=5, until=rig.clock.now() + timedelta(hours=1))
    with pytest.raises(InputError, match="whole number"):
        await rig.service.pause("n1", for_ms=0)
    assert rig.rec().status in SUPERVISED and rig.orch.stopped == []
    held = await rig.service.pause("n1", until=rig.clock.now() + timedelta(hours=2))
    assert held.status is NodeStatus.SLEEPING
    assert held.hold.wake_at == iso(rig.clock.now() + timedelta(hours=2))


async def test_a_node_in_error_cannot_be_paused(rig):
    rig.node(status=NodeStatus.ERROR)
    with pytest.raises(InvalidState, match="Retry"):
        await rig.service.pause("n1")


async def test_a_sleeping_node_wakes_by_the_pass_timer_alone(rig):
    rig.node(live=True)
    rig.sup.start()
    await async_wait_until(lambda: "n1" in rig.sup.decisions.last, what="the start-up pass")
    await rig.service.pause("n1", for_ms=90_000)
    await rig.clock.run_for(1)  # the exit pass arms the timer for the wake
    assert rig.sup.passes.due_at == pytest.approx(rig.clock.monotonic() + 89, abs=0.01)
    await rig.clock.run_for(88)
    assert rig.orch.spawned == []
    await rig.clock.run_for(1.5)
    await async_wait_until(lambda: rig.orch.spawns_of("n1"), what="woken at wake_at")
    assert rig.rec().status in SUPERVISED


async def test_pause_and_resume_are_checked_again_on_the_queue(rig):
    """Each is refused at once when it cannot be done, and checked again on the queue, where a
    node that changed meanwhile (given up on, started) is refused in the same words."""
    rig.node(live=True)
    busy = asyncio.Event()

    async def hold_the_queue():
        await busy.wait()
    queued = asyncio.create_task(rig.sup.serialize(hold_the_queue))
    await asyncio.sleep(0)
    pause = asyncio.create_task(rig.service.pause("n1"))
    await asyncio.sleep(0)
    rig.store.put(rig.present_rec().replace(status=NodeStatus.ERROR))  # given up on meanwhile
    busy.set()
    await queued
    with pytest.raises(InvalidState, match=r"^Node .* is error and cannot be paused\. Use Retry\.$"):
        await pause
    assert rig.orch.stopped == []

    rig.store.put(rig.present_rec().replace(status=NodeStatus.JOINED))
    await rig.service.pause("n1")
    assert await rig.gate.load("n1", secret_kind(rig.present_rec())) is not None  # read: no await before the queue
    busy.clear()
    queued = asyncio.create_task(rig.sup.serialize(hold_the_queue))
    await asyncio.sleep(0)
    resume = asyncio.create_task(rig.service.resume("n1"))
    await asyncio.sleep(0)
    rig.store.put(rig.present_rec().replace(status=NodeStatus.JOINED))  # started meanwhile
    busy.set()
    await queued
    with pytest.raises(InvalidState, match=r"^Node .* is joined now\.$"):
        await resume


# -- resume: the seed's demand --------------------------------------------------------------

@pytest.mark.parametrize("how", ["paused", "sleeping", "done"])
async def test_resume_from_each_hold_starts_now_with_the_budget_untouched(rig, how):
    rig.node(live=True, attempts=2, ago_s=1)
    if how == "done":
        write_run(rig, {"state": "done", "wake_at": None, "reason": "all work done"})
        await exit_with(rig, 0)
    else:
        await rig.service.pause("n1", for_ms=3_600_000 if how == "sleeping" else None)
    assert rig.rec().status.value == how
    resumed = await rig.service.resume("n1")
    assert resumed.status in SUPERVISED and resumed.hold is None
    assert rig.orch.is_running(resumed.handle) and resumed.attempts == 2


async def test_demand_with_a_spent_budget_starts_the_node(rig):
    rig.node(live=True, attempts=5, ago_s=1)  # five is the cap: a crash now would give up
    await rig.service.pause("n1")
    resumed = await rig.service.resume("n1")
    assert rig.orch.is_running(resumed.handle) and resumed.attempts == 5
    assert EventKind.GAVE_UP not in rig.kinds()


async def test_resume_of_a_node_that_is_not_held_is_refused(rig):
    rig.node(live=True)
    with pytest.raises(InvalidState, match="can be resumed"):
        await rig.service.resume("n1")


async def test_retry_also_leaves_done(rig):
    rig.node(live=True, attempts=3, ago_s=1)
    write_run(rig, {"state": "done", "reason": "finished"})
    await exit_with(rig, 0)
    assert rig.rec().status is NodeStatus.DONE
    retried = await rig.service.retry("n1")
    assert retried.status in SUPERVISED and rig.orch.is_running(retried.handle)
    assert retried.attempts == 1  # a retry gives a fresh budget and spends one of it


# -- what the node asks for: run.json ----------------------------------------------------------

async def test_run_json_paused_holds_the_node_by_its_own_word(rig):
    rig.node(live=True, attempts=1, ago_s=600)
    write_run(rig, {"state": "paused", "wake_at": None, "reason": "nothing to do\x1b[31m"})
    await exit_with(rig, 0)
    rec = rig.rec()
    assert rec.status is NodeStatus.PAUSED and rec.hold.by is HeldBy.NODE
    assert rec.hold.reason == "nothing to do [31m"  # one printable line: the escape is gone
    assert rec.attempts == 1 and rec.start.answered and rig.orch.spawned == []
    await rig.clock.run_for(3600)
    await rig.sup.reconcile()
    assert rig.orch.spawned == [] and EventKind.GAVE_UP not in rig.kinds()


async def test_run_json_sleeping_wakes_at_its_wake_at(rig):
    rig.node(live=True)
    wake = rig.clock.now() + timedelta(seconds=3)
    write_run(rig, {"state": "sleeping", "wake_at": iso(wake), "reason": "until the batch"})
    await exit_with(rig, 0)
    assert rig.rec().status is NodeStatus.SLEEPING and rig.rec().hold.wake_at == iso(wake)
    await rig.clock.run_for(2.9)
    await rig.sup.reconcile()
    assert rig.orch.spawned == []
    await rig.clock.run_for(0.2)
    await rig.sup.reconcile()
    assert rig.orch.spawns_of("n1") and rig.rec().status in SUPERVISED


async def test_run_json_sleeping_wakes_by_the_pass_timer_alone(rig):
    """Issue 39 (4): a node's own sleep of a few seconds slept until the next sweep (up to a
    minute), since the pass that wrote its hold armed no timer for its wake."""
    rig.node(live=True)
    rig.sup.start()
    await async_wait_until(lambda: "n1" in rig.sup.decisions.last, what="the start-up pass")
    write_run(rig, {"state": "sleeping", "wake_at": iso(rig.clock.now() + timedelta(seconds=5)), "reason": "soon"})
    rig.orch.exit(rig.present_rec("n1").handle, code=0)
    await async_wait_until(lambda: rig.rec().status is NodeStatus.SLEEPING, what="the node's own hold")
    await async_wait_until(lambda: rig.sup.passes.due_at is not None, what="the wake's timer")
    assert rig.sup.passes.due_at == pytest.approx(rig.clock.monotonic() + 5, abs=0.01)
    await rig.clock.run_for(4.9)
    assert len(rig.orch.spawns_of("n1")) == 0
    await rig.clock.run_for(0.2)
    await async_wait_until(lambda: rig.orch.spawns_of("n1"), what="woken at wake_at, with no sweep")
    assert rig.rec().status in SUPERVISED


async def test_run_json_done_is_terminal_and_no_error(rig):
    rig.node(live=True)
    write_run(rig, {"state": "done", "wake_at": None, "reason": "migrated"})
    await exit_with(rig, 0)
    for _ in range(3):
        await rig.sup.reconcile()
        await rig.clock.run_for(86400)
    assert rig.rec().status is NodeStatus.DONE and rig.rec().error is None and rig.orch.spawned == []


async def test_run_json_is_read_only_after_an_exit_with_code_0(rig):
    rig.node(live=True)
    write_run(rig, {"state": "paused"})
    await exit_with(rig, 1)
    assert rig.rec().status in SUPERVISED and rig.orch.spawns_of("n1")


async def test_the_old_run_json_is_removed_before_each_start(rig):
    rig.node()
    write_run(rig, {"state": "paused"})
    await rig.sup.reconcile()
    assert rig.orch.spawns_of("n1") and not (rig.work / "n1" / "run.json").exists()
    await exit_with(rig, 0)  # this run wrote none: an ordinary exit 0
    await rig.clock.run_for(60)
    await rig.sup.reconcile()
    assert rig.rec().status in SUPERVISED and len(rig.orch.spawns_of("n1")) == 2


def _malformed(folder):
    (folder / "run.json").write_text('{"state": "asleep"}')


def _oversized(folder):
    (folder / "run.json").write_text(json.dumps({"state": "paused", "reason": "x" * MAX_BYTES}))


def _symlink(folder):
    (folder / "elsewhere.json").write_text(json.dumps({"state": "paused"}))
    os.symlink(folder / "elsewhere.json", folder / "run.json")


def _fifo(folder):
    os.mkfifo(folder / "run.json")


def _nested(folder):
    """Issue 39 (5): 3 KB of nested `[` raised RecursionError out of the exit handling."""
    (folder / "run.json").write_text("[" * 3000)


def _past_the_calendar(folder):
    """Issue 39 (6): a wake whose UTC value is past year 9999 was taken, then overflowed."""
    (folder / "run.json").write_text(json.dumps({"state": "sleeping", "wake_at": "9999-12-31T23:00:00-05:00"}))


def _before_the_calendar(folder):
    (folder / "run.json").write_text(json.dumps({"state": "sleeping", "wake_at": "0001-01-01T00:00:00+05:00"}))


@pytest.mark.parametrize("plant", [_malformed, _oversized, _symlink, _fifo, _nested, _past_the_calendar,
                                   _before_the_calendar])
async def test_a_run_json_not_taken_is_one_warning_and_an_ordinary_exit_0(rig, plant, caplog):
    rig.node(live=True)
    folder = rig.work / "n1"
    folder.mkdir(parents=True)
    plant(folder)
    with caplog.at_level(logging.WARNING, logger="cadre_desktop.host.core.supervision.runfile"):
        await exit_with(rig, 0)
    warnings = [r for r in caplog.records if r.name == "cadre_desktop.host.core.supervision.runfile"]
    assert len(warnings) == 1 and "not taken" in warnings[0].getMessage()
    assert rig.rec().status in SUPERVISED and rig.orch.spawns_of("n1")


# -- across a host restart -----------------------------------------------------------------------

async def test_a_hold_survives_a_host_restart_and_a_sleep_keeps_its_wall_time(tmp_path):
    first = Rig(tmp_path)
    first.node("p", live=True)
    first.node("s", live=True)
    await first.service.pause("p")
    await first.service.pause("s", for_ms=60_000)
    await first.close()
    second = Rig(tmp_path)  # the same records file, a new process (its monotonic clock starts anew)
    second.clock.jump_wall(20)
    stored = RecordStore(tmp_path / "hosted-nodes.json").get("p")
    assert stored is not None and stored.status is NodeStatus.PAUSED
    for name in ("p", "s"):
        second.gate._cache[(name, second.sup.kinds.hosted.kind.secret_kind(second.rec(name)))] = "secret"
    await second.sup.reconcile()
    assert second.orch.spawned == [] and second.present_rec("s").status is NodeStatus.SLEEPING
    await second.clock.run_for(39)
    await second.sup.reconcile()
    assert second.orch.spawned == []
    await second.clock.run_for(1)
    await second.sup.reconcile()
    assert [s[0] for s in second.orch.spawned] == ["s"] and second.present_rec("p").status is NodeStatus.PAUSED
    await second.close()


# -- the rules themselves: decide() alone --------------------------------------------------------

def test_decide_holds_rules_one_by_one():
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.records.records import Hold, NodeRecord
    from cadre_desktop.host.core.supervision.decide import Observation, Policy, decide
    from cadre_desktop.settings import Settings
    policy = Policy(Settings())
    hold = Hold(by=HeldBy.PERSON, reason="r", at="2026-01-01T00:00:00Z", wake_at="2026-01-01T00:01:00Z")

    def rec(status, **kw):
        return NodeRecord(id="n1", name="n1", status=status, handle="h1", hold=hold, **kw)
    up, down = Observation(status=DriverStatus.RUNNING), Observation(status=DriverStatus.STOPPED)
    assert decide(rec(NodeStatus.PAUSED), up, policy).decision is Decision.STOP_HELD
    assert decide(rec(NodeStatus.DONE), down, policy).decision is Decision.HELD
    sleeping = rec(NodeStatus.SLEEPING)
    verdict = decide(sleeping, Observation(status=DriverStatus.STOPPED, wake_in_s=42.0), policy)
    assert verdict.decision is Decision.HELD and verdict.due_in_s == 42.0
    assert decide(sleeping, Observation(status=DriverStatus.STOPPED, wake_in_s=0.0), policy).decision is Decision.WAKE
    asked = (NodeStatus.PAUSED, hold)
    joined = NodeRecord(id="n1", name="n1", status=NodeStatus.JOINED, handle="h1")
    verdict = decide(joined, Observation(status=DriverStatus.STOPPED, returncode=0, node_hold=asked,
                                         stopped_cleanly=True), policy)
    assert verdict.decision is Decision.HOLD and verdict.hold == asked
