"""The start gate (issue 26, the storm figure): a pass starts at most K children at once, the rest
wait untouched for a freed slot; a person's start and a single crash never wait for it."""

from __future__ import annotations

import pytest

from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.host.core.supervision.gate import BOUND_S, machine_limit
from tests.support.clock import settle
from tests.support.rig import Rig

K = 3


@pytest.fixture
async def gated(tmp_path):
    """A rig whose gate lets 3 children start at once, with ten supervised nodes all down."""
    r = Rig(tmp_path, start_limit=K)
    for i in range(10):
        r.node(f"n{i}")
    yield r
    await r.close()


def started(r: Rig) -> list[str]:
    """The nodes that got a child, in the order they got it."""
    return [node_id for node_id, _env in r.orch.spawned]


def answer(r: Rig, node_id: str) -> None:
    r.answers.by_port[r.present_rec(node_id).api_port or 0] = {"state": "joined", "node_id": node_id}


async def test_a_storm_pass_starts_k_and_leaves_the_others_untouched(gated):
    before = {f"n{i}": gated.present_rec(f"n{i}") for i in range(10)}
    assert await gated.sup.reconcile() == ["n0", "n1", "n2"]
    for i in range(3, 10):
        node_id = f"n{i}"
        # Nothing written, no attempt, no backoff, no verdict shown: it says what it said.
        assert gated.present_rec(node_id) == before[node_id]
        assert gated.present_rec(node_id).attempts == 0
        assert gated.orch.spawns_of(node_id) == []
        assert node_id not in gated.sup.decisions.last
        assert gated.sup.next_attempt_at(gated.present_rec(node_id)) is None
        assert [e for e in gated.seen if e.node_id == node_id] == []
    assert len(gated.sup.start_gate.starting()) == K


async def test_a_child_that_becomes_ready_lets_the_next_waiting_node_start(gated):
    gated.sup.start()
    await settle()
    assert started(gated) == ["n0", "n1", "n2"]
    answer(gated, "n1")
    await gated.probe.probe_one(gated.present_rec("n1"))  # its first answer frees its slot and kicks a pass
    await settle(30)
    assert started(gated) == ["n0", "n1", "n2", "n3"]
    assert gated.present_rec("n4").attempts == 0


async def test_many_ready_at_once_bring_one_pass_that_starts_the_waiting_in_order(gated):
    gated.sup.start()
    await settle()
    passes = []
    real = gated.sup._begin

    def counting():  # each pass begins once
        passes.append(1)
        return real()

    gated.sup._begin = counting
    for node_id in ("n0", "n1", "n2"):
        answer(gated, node_id)
        await gated.probe.probe_one(gated.present_rec(node_id))
    await settle(30)
    assert started(gated) == [f"n{i}" for i in range(6)]
    assert len(passes) == 1


async def test_a_starting_child_that_exits_frees_its_slot(gated):
    gated.sup.start()
    await settle()
    gated.orch.exit(gated.present_rec("n0").handle)
    await settle(30)
    # n0 waits out its backoff; its slot went to the first waiting node.
    assert started(gated) == ["n0", "n1", "n2", "n3"]
    assert gated.present_rec("n0").attempts == 1


async def test_a_start_that_never_answers_frees_its_slot_after_the_bound(gated):
    gated.sup.start()
    await settle()
    await gated.clock.run_for(BOUND_S - 0.5)
    assert started(gated) == ["n0", "n1", "n2"]
    await gated.clock.run_for(0.5)
    assert started(gated) == [f"n{i}" for i in range(6)]
    assert gated.present_rec("n0").attempts == 1  # still running; only its slot is gone


async def test_a_persons_retry_and_restart_start_at_once_while_the_gate_is_full(gated):
    gated.node("err", status=NodeStatus.ERROR)
    await gated.sup.reconcile()
    assert len(gated.sup.start_gate.starting()) == K
    await gated.service.retry("err")
    await gated.service.restart("n7")
    assert gated.orch.spawns_of("err") and gated.orch.spawns_of("n7")
    # They count as starting: the storm paces around them.
    assert {gated.present_rec("err").handle, gated.present_rec("n7").handle} <= set(gated.sup.start_gate.starting())
    assert not gated.sup.start_gate.has_room()


async def test_a_single_crash_with_an_empty_gate_is_respawned_in_the_same_pass(tmp_path):
    r = Rig(tmp_path, start_limit=K)
    try:
        r.node("a", live=True)
        r.sup.start()
        await settle()
        assert r.sup.start_gate.starting() == []
        r.orch.exit(r.present_rec("a").handle)
        await settle(30)  # no clock moved: the exit's own pass started it
        assert len(r.orch.spawns_of("a")) == 1
        assert r.orch.is_running(r.present_rec("a").handle)
    finally:
        await r.close()


@pytest.mark.parametrize(("cpus", "limit"), [(0, 3), (1, 3), (2, 6), (4, 12), (64, 16)])
def test_the_limit_is_three_starts_a_core_and_capped(cpus, limit):
    assert machine_limit(cpus) == limit


async def test_forked_starts_hold_no_slot(tmp_path):
    """A fork of a loaded node program costs a few milliseconds: a storm of them is not paced."""
    r = Rig(tmp_path, start_limit=K)
    r.orch.fork_starts = True
    for i in range(10):
        r.node(f"n{i}")
    try:
        assert len(await r.sup.reconcile()) == 10
        assert r.sup.start_gate.starting() == []
    finally:
        await r.close()
