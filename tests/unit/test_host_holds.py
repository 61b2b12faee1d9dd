"""The host's holds on the fake clock and the fake driver: Pause all (no end, for a while, until a
time; persisted), its end releasing only what it held, a person's own pause surviving it, a
node's Resume overriding it, a conditions verdict held and released, and `always_run`."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest

from cadre_desktop.errors import InputError, StorageError
from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.ops.views import hold_fields
from cadre_desktop.host.core.records.records import SUPERVISED, HeldBy, NodeStatus
from cadre_desktop.host.core.supervision.decide import Decision
from cadre_desktop.host.core.supervision.host_holds import PAUSE_REASON, ConditionsVerdict, HostHolds, load_pause
from tests.support.polling import async_wait_until
from tests.support.rig import Rig


class Verdicts:
    """A conditions judge that says what the test tells it."""

    def __init__(self) -> None:
        self.now: ConditionsVerdict | None = None

    def verdict(self) -> ConditionsVerdict | None:
        return self.now


class HoldsRig(Rig):
    """The supervision rig with the host's holds in its observer."""

    holds: HostHolds


@pytest.fixture
async def rig(tmp_path):
    r = HoldsRig(tmp_path)
    r.holds = HostHolds(tmp_path / "host-pause.json", r.clock, r.sup.kick)
    r.sup.observer.host_hold = r.holds.wanted
    yield r
    await r.holds.stop()
    await r.close()


async def test_pause_all_stops_every_node_spends_nothing_and_resume_all_starts_them(rig):
    recs = [rig.node(f"n{i}", live=True, attempts=1, ago_s=600) for i in (1, 2)]
    rig.holds.pause_all()
    await rig.sup.reconcile()
    for rec in recs:
        held = rig.rec(rec.id)
        assert held.status is NodeStatus.PAUSED and held.hold.by is HeldBy.PERSON and held.hold.scope == "host"
        assert not rig.orch.is_running(rec.handle)
        assert hold_fields(held, rig.sup)["hold_reason"] == PAUSE_REASON
    await rig.clock.run_for(3600)
    await rig.sup.reconcile()
    assert rig.orch.spawned == [] and rig.sup.decisions.last["n1"]["decision"] == Decision.HELD.value
    rig.holds.resume_all()
    await rig.sup.reconcile()
    for rec in recs:
        back = rig.rec(rec.id)
        assert back.status in SUPERVISED and back.hold is None and back.attempts == 1
        assert rig.orch.spawns_of(rec.id)


async def test_pause_all_for_a_while_ends_by_itself_at_its_time(rig):
    rig.node(live=True)
    rig.sup.start()
    await async_wait_until(lambda: "n1" in rig.sup.decisions.last, what="the start-up pass")
    rig.holds.start()
    rig.holds.pause_all(for_ms=30 * 60_000)
    await rig.sup.reconcile()
    held = rig.rec()
    assert held.status is NodeStatus.SLEEPING
    assert held.hold.wake_at == iso(rig.clock.now() + timedelta(minutes=30))
    await rig.clock.run_for(29 * 60)
    assert rig.orch.spawned == [] and rig.holds.paused() is not None
    await rig.clock.run_for(61)
    await async_wait_until(lambda: rig.orch.spawns_of("n1"), what="started again when the pause ended")
    assert rig.rec().status in SUPERVISED and rig.holds.paused() is None
    assert json.loads(rig.holds.path.read_text())["paused"] is False


async def test_pause_all_ends_on_time_when_the_wall_clock_steps_back(rig):
    """Issue 39 (7): the clock stepped back 10 minutes during a 5 s Pause all kept every node
    asleep 10 more minutes; a pause's length is kept on the monotonic clock while the host runs."""
    rig.node(live=True)
    rig.sup.start()
    await async_wait_until(lambda: "n1" in rig.sup.decisions.last, what="the start-up pass")
    rig.holds.start()
    rig.holds.pause_all(for_ms=5_000)
    await rig.sup.reconcile()
    assert rig.rec().status is NodeStatus.SLEEPING
    rig.clock.jump_wall(-600)
    await rig.clock.run_for(4.9)
    assert rig.orch.spawned == [] and rig.holds.paused() is not None
    assert rig.holds.state_json()["left_ms"] == pytest.approx(100, abs=5)
    await rig.clock.run_for(0.2)
    await async_wait_until(lambda: rig.orch.spawns_of("n1"), what="started again 5 s after the pause, not 10 min")
    assert rig.holds.paused() is None and rig.holds.state_json() == {"paused": False}


async def test_pause_all_ends_on_time_when_the_wall_clock_steps_forward(rig):
    rig.node(live=True)
    rig.sup.start()
    await async_wait_until(lambda: "n1" in rig.sup.decisions.last, what="the start-up pass")
    rig.holds.start()
    rig.holds.pause_all(for_ms=60_000)
    await rig.sup.reconcile()
    rig.clock.jump_wall(3600)  # the wall clock says the end is long past: the length still counts
    await rig.clock.run_for(1)
    await rig.sup.reconcile()
    assert rig.orch.spawned == [] and rig.holds.paused() is not None


async def test_a_pause_in_the_past_is_one_clear_error_and_changes_nothing(rig):
    rig.node(live=True)
    with pytest.raises(InputError, match="in the past"):
        rig.holds.pause_all(until=rig.clock.now() - timedelta(minutes=1))
    assert rig.holds.paused() is None and not rig.holds.path.exists()
    await rig.sup.reconcile()
    assert rig.rec().status in SUPERVISED


async def test_the_end_of_pause_all_leaves_a_node_a_person_paused_on_its_own(rig):
    rig.node("n1", live=True)
    rig.node("n2", live=True)
    await rig.service.pause("n2")
    rig.holds.pause_all()
    await rig.sup.reconcile()
    assert rig.rec("n2").hold.scope == "node"  # its own pause is kept under Pause all
    rig.holds.resume_all()
    await rig.sup.reconcile()
    assert rig.rec("n1").status in SUPERVISED
    assert rig.rec("n2").status is NodeStatus.PAUSED and rig.rec("n2").hold.reason == "paused by a person"


async def test_a_nodes_resume_overrides_pause_all_for_that_node(rig):
    rig.node("n1", live=True)
    rig.node("n2", live=True)
    rig.holds.pause_all()
    await rig.sup.reconcile()
    rig.holds.resumed("n1")
    await rig.service.resume("n1")
    await rig.sup.reconcile()
    assert rig.rec("n1").status in SUPERVISED and rig.rec("n2").status is NodeStatus.PAUSED


async def test_pause_all_survives_a_restart_through_its_file(rig, tmp_path):
    until = rig.clock.now() + timedelta(hours=2)
    rig.holds.pause_all(until=until)
    assert os.stat(rig.holds.path).st_mode & 0o777 == 0o600
    again = HostHolds(rig.holds.path, rig.clock)
    again.load()
    kept = again.paused()
    assert kept is not None and kept.until == until
    rig.clock.advance(2 * 3600)
    late = HostHolds(rig.holds.path, rig.clock)
    late.load()
    assert late.paused() is None  # an ended pause is forgotten at the next start


def test_a_broken_pause_file_is_a_clear_error(tmp_path):
    path = tmp_path / "host-pause.json"
    path.write_text('{"version": 1, "paused": true, "since": "soon"}')
    with pytest.raises(StorageError, match="host-pause.json"):
        load_pause(path)
    path.write_text('{"version": 9, "paused": false}')
    with pytest.raises(StorageError, match="version"):
        load_pause(path)


async def test_conditions_hold_with_their_reason_and_release_when_they_allow(rig):
    verdicts = Verdicts()
    rig.holds.conditions = verdicts
    rig.node("n1", live=True)
    always = rig.node("n2", live=True)
    rig.store.put(rig.rec("n2").replace(always_run=True))
    verdicts.now = ConditionsVerdict("on battery")
    rig.holds.conditions_changed()
    await rig.sup.reconcile()
    held = rig.rec("n1")
    assert held.status is NodeStatus.PAUSED and held.hold.by is HeldBy.CONDITIONS
    assert hold_fields(held, rig.sup) == {"wake_at": None, "held_by": "conditions", "hold_reason": "on battery"}
    assert rig.rec("n2").status in SUPERVISED and rig.orch.is_running(always.handle)
    until = rig.clock.now() + timedelta(hours=3)
    verdicts.now = ConditionsVerdict("outside the schedule until Mon 22:00", until)
    rig.holds.conditions_changed()
    await rig.sup.reconcile()
    assert rig.rec("n1").status is NodeStatus.SLEEPING and rig.rec("n1").hold.wake_at == iso(until)
    assert rig.orch.spawned == []
    verdicts.now = None
    rig.holds.conditions_changed()
    await rig.sup.reconcile()
    assert rig.rec("n1").status in SUPERVISED and rig.orch.spawns_of("n1") and rig.rec("n1").attempts == 0


async def held_on_battery(rig) -> Verdicts:
    """Node n1 running, then held by the conditions (on battery); the verdicts to change them."""
    verdicts = Verdicts()
    rig.holds.conditions = verdicts
    rig.node("n1", live=True)
    verdicts.now = ConditionsVerdict("on battery")
    await rig.sup.reconcile()
    assert rig.rec("n1").status is NodeStatus.PAUSED
    return verdicts


async def test_resume_overrides_the_conditions_until_their_next_change(rig):
    verdicts = await held_on_battery(rig)
    rig.holds.resumed("n1")
    await rig.service.resume("n1")
    await rig.sup.reconcile()
    assert rig.rec("n1").status in SUPERVISED  # the person's word wins
    verdicts.now = ConditionsVerdict("on a metered network")
    rig.holds.conditions_changed()
    await rig.sup.reconcile()
    assert rig.rec("n1").status is NodeStatus.PAUSED and rig.rec("n1").hold.reason == "on a metered network"


async def test_always_run_is_not_exempt_from_pause_all(rig):
    rig.node("n1", live=True)
    rig.store.put(rig.rec("n1").replace(always_run=True))
    rig.holds.pause_all()
    await rig.sup.reconcile()
    assert rig.rec("n1").status is NodeStatus.PAUSED


async def test_a_node_asleep_on_its_own_wakes_into_pause_all_without_a_start(rig):
    rig.node("n1", live=True)
    await rig.service.pause("n1", for_ms=60_000)
    rig.holds.pause_all()
    await rig.sup.reconcile()
    assert rig.rec("n1").hold.scope == "node"  # its own sleep is kept while it lasts
    await rig.clock.run_for(61)
    await rig.sup.reconcile()
    held = rig.rec("n1")
    assert held.status is NodeStatus.PAUSED and held.hold.scope == "host" and rig.orch.spawned == []
    rig.holds.resume_all()
    await rig.sup.reconcile()
    assert rig.rec("n1").status in SUPERVISED and rig.orch.spawns_of("n1")


# -- the rules alone ----------------------------------------------------------------------------

def test_decide_on_a_node_the_host_holds():
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.records.records import Hold, NodeRecord
    from cadre_desktop.host.core.supervision.decide import Observation, Policy, decide
    from cadre_desktop.settings import Settings

    policy = Policy(Settings())
    battery = Hold(HeldBy.CONDITIONS, "on battery", "2026-01-01T00:00:00.000Z", scope="host")
    held = NodeRecord(id="n1", name="one", status=NodeStatus.PAUSED, handle="h1", hold=battery)
    down, up = DriverStatus.STOPPED, DriverStatus.RUNNING
    same = (NodeStatus.PAUSED, Hold(HeldBy.CONDITIONS, "on battery", "2026-01-01T09:00:00.000Z", scope="host"))
    assert decide(held, Observation(status=down), policy).decision is Decision.HOST_RELEASE
    assert decide(held, Observation(status=down, host_hold=same), policy).decision is Decision.HELD
    assert decide(held, Observation(status=up, host_hold=same), policy).decision is Decision.STOP_HELD
    metered = (NodeStatus.PAUSED, Hold(HeldBy.CONDITIONS, "on a metered network", "x", scope="host"))
    verdict = decide(held, Observation(status=down, host_hold=metered), policy)
    assert verdict.decision is Decision.HOST_HOLD and verdict.hold == metered
    running = NodeRecord(id="n1", name="one", status=NodeStatus.JOINED, handle="h1")
    assert decide(running, Observation(status=up, host_hold=same), policy).decision is Decision.HOST_HOLD
    own = held.replace(hold=Hold(HeldBy.PERSON, "paused by a person", "x"))
    assert decide(own, Observation(status=down), policy).decision is Decision.HELD  # its own pause is kept


async def test_resume_all_overrides_the_conditions_until_their_next_change(rig):
    verdicts = await held_on_battery(rig)
    rig.holds.resume_all()
    await rig.sup.reconcile()
    assert rig.rec("n1").status in SUPERVISED and rig.holds.resumed_words()
    verdicts.now = ConditionsVerdict("on battery, on a metered network")
    rig.holds.conditions_changed()
    await rig.sup.reconcile()
    assert rig.rec("n1").status is NodeStatus.PAUSED and rig.holds.resumed_words() is None
