"""Every supervision rule of the first shape, each alone, on a fake clock and a fake driver."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cadre_desktop.errors import OutOfDescriptors, SpawnError
from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.core.records.records import NodeMode, NodeStatus
from cadre_desktop.host.core.vault.secrets import SERVICE
from cadre_desktop.host.live_settings import LiveSettings
from tests.support.polling import async_wait_until
from tests.support.rig import Rig

# 2. what is supervised ----------------------------------------------------------------

@pytest.mark.parametrize("status", [NodeStatus.UNCLAIMED, NodeStatus.JOINING, NodeStatus.JOINED])
async def test_down_supervised_node_without_history_is_respawned_at_once(rig, status):
    rig.node(status=status)
    assert await rig.sup.reconcile() == ["n1"]
    assert rig.rec().attempts == 1
    assert rig.orch.is_running(rig.rec().handle)
    assert rig.orch.spawns_of("n1")[0][1] == {"CADRE_CLAIM_SECRET": "secret-of-n1"}


@pytest.mark.parametrize("status", [NodeStatus.SPAWNING, NodeStatus.ERROR])
async def test_unsupervised_statuses_are_left_alone(rig, status):
    rig.node(status=status)
    assert await rig.sup.reconcile() == []
    assert rig.orch.spawned == []


async def test_record_without_handle_is_left_to_the_code_creating_it(rig):
    rig.node(handle=None)
    assert await rig.sup.reconcile() == []
    assert rig.orch.spawned == []


async def test_invitation_node_is_respawned_with_its_invitation(rig):
    rig.node(status=NodeStatus.JOINING, mode=NodeMode.INVITATION)
    await rig.sup.reconcile()
    assert rig.orch.spawned[0][1] == {"CADRE_INVITATION": "secret-of-n1"}


# 3. refill ------------------------------------------------------------------------

async def test_running_node_gets_budget_refilled_after_healthy_period(rig):
    rig.node(live=True, attempts=3, ago_s=600.001)
    await rig.sup.reconcile()
    assert rig.rec().attempts == 0
    assert rig.orch.spawned == []


async def test_running_node_keeps_budget_inside_healthy_period(rig):
    rig.node(live=True, attempts=3, ago_s=599)
    await rig.sup.reconcile()
    assert rig.rec().attempts == 3


async def test_unparsable_timestamp_never_erases_history(rig):
    rig.node(live=True, attempts=3, last_attempt_at="yesterday-ish")
    await rig.sup.reconcile()
    assert rig.rec().attempts == 3


async def test_refill_rereads_the_record_and_never_writes_a_stale_snapshot(rig):
    snapshot = rig.node(live=True, attempts=2, ago_s=601, status=NodeStatus.UNCLAIMED)
    # A claim lands after the pass took its snapshot.
    rig.store.put(rig.rec().replace(status=NodeStatus.JOINED, cadre="family"))
    verdict = rig.sup.observer.observe(snapshot, rig.lifecycle.kind, uncounted=False)
    from cadre_desktop.host.core.supervision.decide import decide
    await rig.sup._carry_out(rig.lifecycle, snapshot, decide(snapshot, verdict, rig.sup.kinds.policy()))
    assert rig.rec().cadre == "family" and rig.rec().status is NodeStatus.JOINED
    assert rig.rec().attempts == 0


# 4. give up ---------------------------------------------------------------------

async def test_gives_up_when_down_with_budget_spent_record_first_then_stop(rig):
    rec = rig.node(live=True, attempts=5, ago_s=1)
    status_at_stop = []
    rig.orch.on_stop = lambda hid: status_at_stop.append(rig.rec().status)
    # The supervisor sees the node down while a child is still there to stop.
    rig.orch.status = lambda hid, real=rig.orch.status: "failed" if hid == rec.handle else real(hid)
    assert await rig.sup.reconcile() == []
    after = rig.rec()
    assert after.status is NodeStatus.ERROR
    assert "gave up after 5 attempts" in after.error
    assert status_at_stop == [NodeStatus.ERROR]
    assert rig.orch.removed == []  # work folder kept
    kinds = [e.kind for e in rig.seen]
    assert EventKind.GAVE_UP in kinds and EventKind.CHANGED in kinds


async def test_gives_up_after_fifth_attempt_of_a_node_that_dies_at_once(tmp_path):
    rig = Rig(tmp_path, start_grace_ms=0)  # no grace timer: this test drives every pass itself
    rig.node()
    for attempt in range(1, 6):
        respawned = await rig.sup.reconcile()
        assert respawned == ["n1"], f"attempt {attempt}"
        rig.orch.exit(rig.present_rec().handle)
        await rig.clock.run_for(rig.sup.kinds.policy().backoff_s(attempt))
    await rig.sup.reconcile()
    assert rig.present_rec().status is NodeStatus.ERROR
    assert len(rig.orch.spawned) == 5
    assert [e.kind for e in rig.seen].count(EventKind.GAVE_UP) == 1
    await rig.close()


async def test_respawn_that_throws_with_budget_spent_gives_up(rig):
    rig.node(attempts=4, ago_s=10_000)
    rig.orch.spawn_error = SpawnError("could not start the node program 'x'")
    await rig.sup.reconcile()
    rec = rig.rec()
    assert rec.attempts == 5
    assert rec.status is NodeStatus.ERROR
    assert "could not start the node program" in rec.error


async def test_respawn_that_throws_below_budget_counts_and_waits(rig):
    rig.node()
    rig.orch.spawn_error = SpawnError("boom")
    await rig.sup.reconcile()
    rec = rig.rec()
    assert rec.status is NodeStatus.JOINED and rec.attempts == 1 and rec.error == "boom"
    await rig.sup.reconcile()
    assert rig.rec().attempts == 1  # inside the 10 s backoff now


async def test_a_descriptor_shortage_never_spends_a_nodes_attempts(rig):
    """Out of descriptors is the machine's trouble: the node is tried again, never given up on."""
    rig.node(attempts=4, ago_s=10_000)
    rig.orch.spawn_error = OutOfDescriptors("Starting node n1 failed: the host has no file descriptor left")
    for _ in range(3):
        await rig.sup.reconcile()
        rec = rig.rec()
        assert rec.status is NodeStatus.JOINED and rec.attempts == 4, rec
        assert "no file descriptor left" in rec.error
    rig.orch.spawn_error = None
    assert await rig.sup.reconcile() == ["n1"]
    assert rig.rec().attempts == 5 and rig.rec().status is NodeStatus.JOINED


async def test_give_up_leaves_a_record_removed_mid_pass_alone(rig):
    rig.node(attempts=5)
    rig.store.remove("n1")
    await rig.sup.give_up("n1", "x")
    assert rig.rec() is None
    assert rig.orch.stopped == []


async def test_give_up_leaves_a_record_already_in_error_alone(rig):
    rig.node(status=NodeStatus.ERROR)
    await rig.sup.give_up("n1", "second reason")
    assert rig.rec().error is None
    assert rig.seen == []


async def test_a_budget_lowered_while_running_counts_from_the_next_pass(tmp_path):
    r = Rig(tmp_path, respawn_max_attempts=5)
    r.node("a", attempts=3, ago_s=3600)  # down, two attempts left under the old budget
    live = LiveSettings(store=r.store, driver=None, service=None, supervisor=r.sup, lending=None, judge=None, refresh=lambda: None)
    await live.apply(r.settings, r.settings.with_changes(respawn_max_attempts=3))
    assert await r.sup.reconcile() == []
    assert r.present_rec("a").status is NodeStatus.ERROR and "gave up after 3 attempts" in (r.present_rec("a").error or "")
    await r.close()


# 5. backoff ------------------------------------------------------------------------

@pytest.mark.parametrize("attempts, wait_s", [(1, 10), (2, 20), (3, 40), (4, 80)])
async def test_backoff_doubles_from_the_base(rig, attempts, wait_s):
    rig.node(attempts=attempts, ago_s=wait_s - 0.001)
    assert await rig.sup.reconcile() == []
    await rig.clock.run_for(0.001)
    assert await rig.sup.reconcile() == ["n1"]
    assert rig.rec().attempts == attempts + 1


async def test_backoff_is_capped(tmp_path):
    r = Rig(tmp_path, respawn_max_attempts=20)
    assert r.sup.kinds.policy().backoff_s(0) == 0
    assert r.sup.kinds.policy().backoff_s(6) == 300
    assert r.sup.kinds.policy().backoff_s(19) == 300
    await r.close()


async def test_unparsable_timestamp_is_eligible_at_once(rig):
    rig.node(attempts=2, last_attempt_at="not-a-time")
    assert await rig.sup.reconcile() == ["n1"]


# 6. abandoned ------------------------------------------------------------------------

async def test_remove_while_a_pass_is_queued_abandons_without_counting(rig):
    rig.node()
    held = asyncio.Event()

    async def hold():
        await held.wait()
    queued = asyncio.create_task(rig.sup.serialize(hold))
    pass_task = asyncio.create_task(rig.sup.reconcile())
    await asyncio.sleep(0)
    await rig.service.remove("n1")
    held.set()
    await queued
    assert await pass_task == []
    assert rig.orch.spawned == []
    assert rig.rec() is None
    assert rig.keyring.items == {}


async def test_give_up_between_the_decision_and_the_start_abandons(rig):
    rec = rig.node()
    rig.store.put(rig.rec().replace(status=NodeStatus.ERROR))
    assert await rig.sup.starter.start(rig.lifecycle, "n1", counted=True, expect_handle=rec.handle) is False
    assert rig.orch.spawned == [] and rig.rec().attempts == 0


# 7. failures stay local -------------------------------------------------------------

async def test_one_failing_record_never_ends_the_pass(rig):
    rig.node("a")
    rig.node("b")
    real_spawn = rig.orch.spawn

    def spawn(node_id, env, want_ports=None, avoid_ports=(), attempt=0):
        if node_id == "a":
            raise RuntimeError("unexpected")
        return real_spawn(node_id, env, want_ports=want_ports, attempt=attempt)

    rig.orch.spawn = spawn
    assert await rig.sup.reconcile() == ["b"]


async def test_malformed_records_file_is_logged_not_thrown(rig, caplog):
    rig.store.path.write_text("{broken")  # before the first read: nothing cached
    with caplog.at_level(logging.ERROR):
        assert await rig.sup.reconcile() == []
    assert "not valid JSON" in caplog.text


# 8. orphans ------------------------------------------------------------------------

async def test_orphan_handles_are_reported_once_and_left_running(rig, caplog):
    orphan = rig.orch.add_live("ghost")
    with caplog.at_level(logging.WARNING):
        rig.sup.start()
        await asyncio.sleep(0)
        await rig.sup.reconcile()
    await rig.sup.stop()
    assert caplog.text.count("no record names it") == 1
    assert rig.orch.is_running(orphan.id)
    assert rig.orch.stopped == []


# 1. triggers -------------------------------------------------------------------------

async def test_start_runs_one_pass_and_exits_trigger_passes(rig):
    rig.node("a")
    rig.sup.start()
    await async_wait_until(lambda: rig.orch.spawns_of("a"), what="start-up respawn")
    # The child dies: a pass runs within the same loop turn, no timer involved.
    handle = rig.rec("a").handle
    await rig.clock.run_for(10)  # past the backoff of one attempt (sweep is 60 s, not due)
    rig.orch.exit(handle)
    await async_wait_until(lambda: len(rig.orch.spawns_of("a")) == 2, what="exit-triggered respawn")
    await rig.sup.stop()


async def test_exit_storm_coalesces_into_one_queued_pass(rig):
    for i in range(10):
        rig.node(f"n{i}", live=True)
    passes = []
    real = rig.sup._begin

    def counting():  # each pass begins once
        passes.append(1)
        return real()

    rig.sup._begin = counting
    rig.sup._unsubscribe = rig.orch.subscribe(rig.sup._on_exit)
    for i in range(10):
        rig.orch.exit(rig.rec(f"n{i}").handle)
    await async_wait_until(lambda: len(rig.orch.spawned) == 10, what="all respawned")
    assert len(passes) == 1
    await rig.sup.stop()


async def test_periodic_sweep_catches_a_death_nobody_reported(rig):
    rig.node("a", live=True)
    rig.sup.start()
    for _ in range(10):
        await asyncio.sleep(0)
    rig.orch.handles[rig.rec("a").handle].alive = False  # no exit event
    await rig.clock.run_for(59)
    assert rig.orch.spawned == []
    await rig.clock.run_for(1)
    await async_wait_until(lambda: len(rig.orch.spawns_of("a")) == 1, what="sweep respawn")
    await rig.sup.stop()


async def test_stop_ends_timer_and_subscription(rig):
    rig.node("a", live=True)
    rig.sup.start()
    await asyncio.sleep(0)
    await rig.sup.stop()
    rig.orch.exit(rig.rec("a").handle)
    await rig.clock.run_for(120)
    assert rig.orch.spawned == []
    assert rig.orch.listeners == []


async def test_in_flight_pass_abandons_records_it_has_not_reached_after_stop(rig):
    rig.node("a")
    rig.node("b")
    real_start = rig.sup.starter.start

    async def start_then_stop(lc, node_id, **kw):
        started = await real_start(lc, node_id, **kw)
        rig.sup.passes.stopped = True  # what stop() sets, without cancelling the pass
        return started
    rig.sup.starter.start = start_then_stop
    assert await rig.sup.reconcile() == ["a"]
    assert rig.orch.spawns_of("b") == []


# 9. restart ---------------------------------------------------------------------------

async def test_restart_stops_and_respawns_without_spending_budget(rig):
    rig.node(live=True, attempts=2, ago_s=5)
    old = rig.rec().handle
    await rig.service.restart("n1")
    assert rig.orch.stopped == [old]
    assert rig.rec().handle != old and rig.orch.is_running(rig.rec().handle)
    assert rig.rec().attempts == 2


@pytest.mark.parametrize("case", ["error", "no-handle", "down", "missing"])
async def test_address_restart_leaves_alone_what_it_should_not_touch(rig, case):
    if case == "error":
        rig.node(status=NodeStatus.ERROR, live=True)
    elif case == "no-handle":
        rig.node(handle=None)
    elif case == "down":
        rig.node(live=False)
    if case == "missing":
        with pytest.raises(Exception, match="no node"):
            await rig.service.restart("n1", only_if_running=True)
    else:
        assert await rig.service.restart("n1", only_if_running=True) is None
    assert rig.orch.spawned == [] and rig.orch.stopped == []


async def test_a_node_in_backoff_is_respawned_when_the_wait_ends_not_at_the_sweep(rig):
    rig.node("a", attempts=1, ago_s=0)  # just tried: the next try is due in 10 s
    rig.sup.start()
    await async_wait_until(lambda: rig.sup.passes.due_at is not None, what="backoff timer armed")
    await rig.clock.run_for(9.9)
    assert rig.orch.spawned == []
    await rig.clock.run_for(0.1)
    await async_wait_until(lambda: rig.orch.spawns_of("a"), what="respawn at the end of the backoff")
    assert rig.store.get("a").attempts == 2
    # It dies again: the next wait (20 s) is armed by the pass that follows the exit.
    rig.orch.exit(rig.store.get("a").handle)
    await async_wait_until(lambda: rig.sup.decisions.last["a"]["decision"] == "wait", what="the pass after the exit")
    await rig.clock.run_for(15)  # the start grace timer fires on the way: the pass re-arms for the rest
    await rig.clock.run_for(4.5)
    assert len(rig.orch.spawns_of("a")) == 1
    await rig.clock.run_for(0.5)
    await async_wait_until(lambda: len(rig.orch.spawns_of("a")) == 2, what="second respawn")
    await rig.sup.stop()


async def test_nodes_stopped_on_a_clean_quit_start_again_without_counting_an_attempt(rig):
    rig.node("quit")
    rig.node("crashed")
    rig.sup.start(stopped_cleanly=frozenset({"quit"}))
    await async_wait_until(lambda: len(rig.orch.spawned) == 2, what="start-up pass")
    assert rig.store.get("quit").attempts == 0
    assert rig.store.get("crashed").attempts == 1
    # Only that first start is free: a later crash counts as usual.
    await rig.clock.run_for(1)
    rig.orch.exit(rig.store.get("quit").handle)
    await async_wait_until(lambda: len(rig.orch.spawns_of("quit")) == 2, what="crash respawn")
    assert rig.store.get("quit").attempts == 1
    await rig.sup.stop()


async def test_a_failover_node_that_served_and_stopped_at_its_lease_deadline_starts_again_uncounted(rig):
    """Exit 6 (its lease deadline passed, node contract) of a child whose start had answered: started
    again without spending an attempt, even with its budget spent; one that never answered is counted."""
    rig.node("served", live=True, attempts=3, ago_s=1, answered=True)
    rig.node("never", live=True, attempts=1, ago_s=600, answered=False)
    rig.sup.start()
    for node_id in ("served", "never"):
        rig.orch.exit(rig.store.get(node_id).handle, code=6)
    await rig.sup.reconcile()
    assert len(rig.orch.spawns_of("served")) == 1 and rig.store.get("served").attempts == 3
    assert rig.store.get("served").status is NodeStatus.JOINED
    assert len(rig.orch.spawns_of("never")) == 1 and rig.store.get("never").attempts == 2
    await rig.sup.stop()


async def test_remove_of_an_orphans_id_stops_it_and_deletes_its_data(rig):
    """Seed 000: "Run `node remove <id>` to stop it and delete its data" (issue 39, item 18)."""
    rig.node("kept", live=True)
    orphan = rig.orch.add_live("ghost")
    rig.keyring.items[(SERVICE, "ghost/claim-secret")] = "secret-of-ghost"
    assert await rig.service.remove("ghost") is False  # no record: nothing of a record is touched
    assert await rig.service.reclaim_orphan("ghost") == [orphan.pid]
    assert rig.orch.removed == ["ghost"], "its work folder and log were not deleted"
    assert not rig.orch.is_running(orphan.id), "the orphan still runs"
    assert (SERVICE, "ghost/claim-secret") not in rig.keyring.items, "its claim secret was kept"
    assert rig.store.pending_removals() == [], "its tombstone was left"
    assert rig.orch.is_running(rig.rec("kept").handle) and (SERVICE, "kept/claim-secret") in rig.keyring.items
    assert await rig.service.reclaim_orphan("ghost") == []  # said once: nothing left to reclaim
    assert await rig.service.reclaim_orphan("kept") == []  # a record's child is never an orphan


async def test_a_quit_leaves_orphans_running(rig):
    from cadre_desktop.host.core.supervision.orphans import find_orphans
    rig.node("kept", live=True)
    orphan = rig.orch.add_live("ghost")
    left = find_orphans(rig.orch, rig.sup.kinds.lifecycles)
    assert [h.node_id for h in left] == ["ghost"]
    await rig.orch.stop_all(leave=frozenset(h.node_id for h in left))
    assert rig.orch.is_running(orphan.id) and not rig.orch.is_running(rig.rec("kept").handle)
