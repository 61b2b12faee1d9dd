"""The seed fixes of supervision v3, each alone on the fake clock and the fake driver: the start
grace measured from the start mark across a restart, an unreadable start mark costing only its
own node its grace, and an exit storm that joins the pass waiting for the serial queue."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.ops.views import NodeViews
from cadre_desktop.host.core.records.records import StartMark
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.host.core.supervision.decide import starting_words
from tests.support.clock import settle
from tests.support.polling import async_wait_until
from tests.support.rig import Rig


def mark_ago(rig: Rig, seconds: float, failures: int = 0) -> StartMark:
    return StartMark(attempt=0, at=iso(rig.clock.now() - timedelta(seconds=seconds)), failures=failures)


async def test_a_start_60_s_old_at_a_host_restart_gets_no_fresh_grace(rig):
    rec = rig.node(live=True, answered=False, mark=mark_ago(rig, 60))  # this host never saw it start
    await rig.sup.reconcile()
    assert rig.sup.decisions.last["n1"]["decision"] == "stalled"
    assert rig.orch.stopped == [rec.handle]
    assert rig.sup.decisions.last["n1"]["error"] == "never answered within 15 s"


async def test_a_start_10_s_old_at_a_host_restart_has_5_s_of_grace_left(rig):
    rig.node(live=True, answered=False, mark=mark_ago(rig, 10))
    await rig.sup.reconcile()
    assert rig.sup.decisions.last["n1"]["decision"] == "starting"
    await rig.clock.run_for(4.9)
    await rig.sup.reconcile()
    assert rig.orch.stopped == []
    await rig.clock.run_for(0.1)
    await rig.sup.reconcile()
    assert rig.sup.decisions.last["n1"]["decision"] == "stalled"


def plant_rows(rig: Rig, path) -> None:
    """Two live unanswered nodes; the start mark of `bad` is then spoiled on disk."""
    rig.node("good", live=True, answered=False, mark=mark_ago(rig, 60))
    rig.node("bad", live=True, answered=False, mark=mark_ago(rig, 60))
    doc = json.loads(path.read_text())
    doc["nodes"]["bad"]["start"] = {"attempt": "seven", "at": 5}
    path.write_text(json.dumps(doc))


async def test_an_unreadable_start_mark_costs_only_its_node_its_grace(tmp_path):
    path = tmp_path / "hosted-nodes.json"
    first = Rig(tmp_path)
    plant_rows(first, path)
    await first.close()
    rig = Rig(tmp_path)  # a new host reads the file: every row is loaded
    rig.gate._cache.update({(n, rig.sup.kinds.hosted.kind.secret_kind(rig.rec(n))): "s" for n in ("good", "bad")})
    bad = RecordStore(path).get("bad")
    assert bad is not None and bad.start is None and "start mark is unreadable" in (bad.problem or "")
    assert {r.id for r in rig.store.list()} == {"good", "bad"}
    views = NodeViews(store=rig.store, driver=rig.orch, supervisor=rig.sup, probe=rig.probe, clock=rig.clock,
                      address=lambda: "127.0.0.1", log_path=lambda i: tmp_path / i,
                      claim_secret=lambda i: None)
    assert "start mark is unreadable" in (views.get("bad").problem or "") and views.get("good").problem is None
    await rig.close()


async def test_a_node_whose_mark_is_unreadable_is_given_no_grace_and_left_to_the_other_rules(rig):
    rig.node("bad", live=True, answered=False, mark=None)
    rig.store.put(rig.rec("bad").replace(problem="its start mark is unreadable"))
    await rig.sup.reconcile()
    assert rig.sup.decisions.last["bad"]["decision"] not in ("starting", "stalled")
    assert rig.orch.stopped == []


async def test_exits_while_the_exit_pass_waits_for_the_queue_join_it(rig):
    names = ("a", "b", "c")
    for name in names:
        rig.node(name, live=True)
    rig.sup.start()
    await async_wait_until(lambda: all(n in rig.sup.decisions.last for n in names), what="the start-up pass")
    passes = []
    original = rig.sup._begin

    def counted():  # each pass begins once
        passes.append(1)
        return original()
    rig.sup._begin = counted
    release = asyncio.Event()
    holder = asyncio.create_task(rig.sup.serialize(release.wait))  # a long Retry holds the queue
    await settle()
    for name in names:  # the storm: the first exit queues a pass, the others come while it waits
        rig.orch.exit(rig.rec(name).handle)
        await settle()
    release.set()
    await holder
    await async_wait_until(lambda: all(rig.orch.spawns_of(n) for n in names), what="all three started")
    await settle(50)
    assert len(passes) == 1


# -- a start in progress, in the seed's words ------------------------------------------------

def test_starting_words_say_how_long_of_which_grace_and_what_came_before():
    mark = StartMark(attempt=3, at="2026-01-01T00:00:00Z", by="host:4711", failures=2,
                     last_exit="exited with code 1: no config")
    assert starting_words(12.2, 30, mark) == ("starting for 12 s of a 30 s grace (2 failed starts before; "
                                              "last: exited with code 1: no config; started by host:4711)")
    assert starting_words(3, 15, StartMark(attempt=1, at="x", by="host:1")) == (
        "starting for 3 s of a 15 s grace (started by host:1)")
    assert starting_words(None, 0, None) == "starting"


async def test_a_view_of_a_start_in_progress_says_it_in_the_seeds_words(rig):
    rig.node(live=True, answered=False, mark=StartMark(attempt=0, at=iso(rig.clock.now() - timedelta(seconds=12)),
                                                       by="host:4711", failures=2, last_exit="exited with code 1: x"))
    assert rig.sup.starting(rig.rec()) == ("starting for 12 s of a 60 s grace (2 failed starts before; "
                                           "last: exited with code 1: x; started by host:4711)")
    answered = rig.node("ok", live=True, answered=True)
    assert rig.sup.starting(answered) is None
    down = rig.node("down", live=False)
    assert rig.sup.starting(down) is None


def test_every_kind_of_record_has_every_change_in_its_transition_table():
    from cadre_desktop.host.core.records.lifecycle import HOSTED, Change
    from cadre_desktop.host.lending.kind import DONATED
    for kind in (HOSTED, DONATED):
        assert set(kind.transitions) == set(Change), f"{kind.noun}: {set(Change) - set(kind.transitions)}"


def test_the_rule_table_names_every_decision():
    from cadre_desktop.host.core.supervision.decide import Decision, decide
    table = decide.__doc__ or ""
    missing = [d.name for d in Decision if f"-> {d.name}" not in table]
    assert not missing, f"decide()'s docstring, the rule table, does not give {missing}"


# -- the four rules that live in decide() since the house v4 -------------------------------------

def _down_record(attempts: int = 0):
    from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus, RespawnInfo

    respawn = RespawnInfo(attempts, "2026-01-01T00:00:00.000Z") if attempts else None
    return NodeRecord(id="n1", name="n1", status=NodeStatus.JOINED, handle="h1", respawn=respawn)


def test_decide_counts_a_start_that_raised_unless_the_machine_ran_out_of_descriptors():
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.supervision.decide import Decision, Observation, Policy, StartFailure, decide
    from cadre_desktop.settings import Settings

    policy = Policy(Settings())
    spawn = StartFailure(error="the node program is missing", message="the node program is missing")
    verdict = decide(_down_record(), Observation(status=DriverStatus.FAILED, start_failure=spawn), policy)
    assert verdict.decision is Decision.START_FAILED and verdict.counted is True
    assert verdict.reason == "the node program is missing"
    shortage = StartFailure(error="too many open files", message="too many open files", machine=True)
    verdict = decide(_down_record(), Observation(status=DriverStatus.FAILED, start_failure=shortage), policy)
    assert verdict.decision is Decision.START_FAILED and verdict.counted is False


def test_decide_gives_up_on_a_start_that_raised_once_the_attempts_are_spent():
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.supervision.decide import Decision, Observation, Policy, StartFailure, decide
    from cadre_desktop.settings import Settings

    policy = Policy(Settings(respawn_max_attempts=3))
    written = Observation(status=DriverStatus.FAILED,
                          start_failure=StartFailure(error="e", message="no such program", recorded=True))
    spent = decide(_down_record(attempts=3), written, policy)
    assert spent.decision is Decision.GIVE_UP and spent.reason == "could not be started: no such program"
    assert decide(_down_record(attempts=2), written, policy).decision is Decision.LEAVE


def test_decide_holds_a_node_only_as_its_kind_can_be_held_and_refuses_the_rest():
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.records.records import HeldBy, Hold, NodeStatus
    from cadre_desktop.host.core.supervision.decide import Decision, Observation, Policy, decide
    from cadre_desktop.settings import Settings

    policy = Policy(Settings())
    asked = ("sleeping", Hold(by=HeldBy.NODE, reason="asked", at="2026-01-01T00:00:00.000Z"))
    held = decide(_down_record(), Observation(status=DriverStatus.STOPPED, returncode=0, node_hold=asked), policy)
    assert held.decision is Decision.HOLD and held.hold == (NodeStatus.SLEEPING, asked[1])
    refused = decide(_down_record(), Observation(status=DriverStatus.STOPPED, returncode=0, node_hold=asked,
                                                 holdable={}), policy)
    assert refused.decision is Decision.START and refused.refused_hold == "sleeping" and refused.hold is None


def test_decide_leaves_a_node_to_start_when_the_start_gate_is_full():
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.supervision.decide import Decision, Observation, Policy, SecretState, decide
    from cadre_desktop.settings import Settings

    policy = Policy(Settings())
    full = Observation(status=DriverStatus.FAILED, gate_room=False)
    assert decide(_down_record(), full, policy).decision is Decision.GATED
    assert decide(_down_record(), Observation(status=DriverStatus.FAILED), policy).decision is Decision.START
    # The keyring's rule comes first: a node without its secret waits for it, gate or not.
    waiting = Observation(status=DriverStatus.FAILED, gate_room=False, secret=SecretState.WAITING)
    assert decide(_down_record(), waiting, policy).decision is Decision.WAIT_KEYRING


def test_decide_starts_no_failover_node_this_computer_holds_under_no_valid_lease():
    """Regression (issue 36, never twice): right after a wake a failover node past its lease exited and was
    started again at once with a deadline already past, over and over until the host gave up on it."""
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.supervision.decide import LEASE_LOOK_S, Decision, Observation, Policy, decide
    from cadre_desktop.settings import Settings

    policy = Policy(Settings(respawn_max_attempts=3))
    waiting = Observation(status=DriverStatus.STOPPED, returncode=6, lease_wait="waiting for the lease",
                          stopped_cleanly=True)
    for attempts in (0, 3):  # neither started nor given up on, whatever its budget
        verdict = decide(_down_record(attempts), waiting, policy)
        assert verdict.decision is Decision.WAIT_LEASE and not verdict.counted
        assert verdict.reason == "waiting for the lease" and verdict.due_in_s == LEASE_LOOK_S
    assert decide(_down_record(), Observation(status=DriverStatus.STOPPED, returncode=6), policy).decision \
        is Decision.START


def test_decide_counts_no_attempt_for_a_failover_node_that_served_then_stopped_at_its_lease_deadline():
    """Regression (issue 36): a failover node whose renewals failed for a while stopped at its deadline
    (exit 6) and, its lease valid again, was started again counting an attempt: a laptop on a flaky
    network spent its budget on lease lapses and the host gave up on a node that never crashed."""
    from cadre_desktop.host.core.driver import DriverStatus
    from cadre_desktop.host.core.supervision.decide import Decision, Observation, Policy, decide
    from cadre_desktop.settings import Settings

    policy = Policy(Settings(respawn_max_attempts=3))
    served = Observation(status=DriverStatus.STOPPED, returncode=6, answered=True, since_attempt_s=0.1)
    for attempts in (0, 3):  # its budget spent or not, inside its backoff or not: started, uncounted
        verdict = decide(_down_record(attempts), served, policy)
        assert verdict.decision is Decision.START and not verdict.counted
    # Exit 6 before it ever answered (its deadline wrong from the start): a failed start, counted.
    never = Observation(status=DriverStatus.STOPPED, returncode=6, answered=False)
    assert decide(_down_record(1), never, policy).counted
    assert decide(_down_record(3), never, policy).decision is Decision.GIVE_UP
    # Any other exit after answering is a crash, as always.
    crash = Observation(status=DriverStatus.STOPPED, returncode=1, answered=True)
    assert decide(_down_record(3), crash, policy).decision is Decision.GIVE_UP
