"""The take-over decision (host/fleetstate/takeover.py) against seed 003's rules, on a fake clock.

Each test walks the shared state as the store would hold it: a take writes the holder, the
generation + 1 and the start mark (`took`), a copy that answers spends the mark (`served`).
"""

from __future__ import annotations

import dataclasses

from cadre_desktop.host.fleetstate.shared import NodeShared, StartMark
from cadre_desktop.host.fleetstate.takeover import THIRD_COMPUTER, Action, FleetView, TakeoverRules, decide_takeover, mark_age_s, start_grace
from tests.support.clock import FakeClock

RULES = TakeoverRules(start_grace_s=15.0, start_grace_max_s=120.0)


def view(me: str = "b", *, alive: bool = False, members: int = 3, quorum: bool = True, room: bool = True,
         seen: float | None = None, own_left: float | None = 10.0) -> FleetView:
    return FleetView(me=me, members=members, quorum=quorum, room=room, holder_lease_alive=alive,
                     own_lease_left_s=own_left, mark_seen_at=seen)


def held(holder: str = "a", generation: int = 1, *, failover: bool = True, spent: bool = True,
         at: float = 0.0, failures: int = 0) -> NodeShared:
    mark = StartMark(generation, at, holder, failures)
    return NodeShared("study", holder, generation, mark, generation if spent else generation - 1, failover)


def took(node: NodeShared, taker: str, at: float, failures: int, last_exit: str | None = None) -> NodeShared:
    """What the store holds after `taker` won its take of `node`."""
    return dataclasses.replace(node, holder=taker, generation=node.generation + 1,
                               mark=StartMark(node.generation + 1, at, taker, failures, last_exit))


def test_a_holder_whose_lease_is_alive_keeps_its_node() -> None:
    verdict = decide_takeover(held(), view(alive=True), RULES, now=100.0)
    assert verdict.action is Action.NOTHING and "lease is alive" in verdict.reason


def test_an_expired_lease_loses_the_node_at_once_when_its_start_answered() -> None:
    verdict = decide_takeover(held(generation=4), view(), RULES, now=100.0)
    assert verdict.action is Action.TAKE
    assert (verdict.expected, verdict.holder, verdict.failures) == (4, "a", 0)
    assert verdict.grace_s == 15.0 and "a's lease expired" in verdict.reason


def test_lease_expiry_on_the_fake_clock_turns_nothing_into_take() -> None:
    clock = FakeClock()
    node = held()
    assert decide_takeover(node, view(alive=True), RULES, clock.wall()).action is Action.NOTHING
    clock.advance(15.0)  # the lease time passes; the store drops a's lease key
    assert decide_takeover(node, view(alive=False), RULES, clock.wall()).action is Action.TAKE


def test_racing_takers_both_decide_take_on_the_same_generation_and_the_loser_then_does_nothing() -> None:
    node = held(generation=2)
    b, c = decide_takeover(node, view("b"), RULES, 50.0), decide_takeover(node, view("c"), RULES, 50.0)
    assert b.action is c.action is Action.TAKE and b.expected == c.expected == 2
    after = took(node, "b", 50.0, b.failures)  # the transaction admitted b; c's compare of 2 fails
    again = decide_takeover(after, view("c", alive=True), RULES, 50.5)
    assert again.action is Action.NOTHING and "held by b" in again.reason


def test_a_start_in_its_grace_is_left_alone_even_when_its_holder_is_gone() -> None:
    node = held(holder="b", generation=3, spent=False, at=100.0)
    verdict = decide_takeover(node, view("c", seen=100.0), RULES, now=110.0)
    assert verdict.action is Action.WAIT and verdict.until == 115.0
    assert "in its grace" in verdict.reason


def test_a_start_that_never_answered_is_taken_after_its_grace_and_counted_as_failed() -> None:
    node = held(holder="b", generation=3, spent=False, at=100.0)
    verdict = decide_takeover(node, view("c", seen=100.0), RULES, now=115.0)
    assert verdict.action is Action.TAKE and verdict.failures == 1
    assert verdict.grace_s == 30.0
    assert verdict.last_exit == "the start of generation 3 on b never answered within 15 s"


def test_backoff_across_computers_doubles_the_grace_per_failed_start_up_to_the_cap() -> None:
    clock = FakeClock()
    node = held(holder="a", generation=1)
    graces: list[float] = []
    takers = ["b", "c", "a", "b", "c", "a"]
    marked = clock.wall()
    for i, taker in enumerate(takers):
        if i:  # inside the last start's grace every computer waits; at its end one takes
            early = decide_takeover(node, view(taker, seen=marked), RULES, clock.wall() + 1.0)
            assert early.action is Action.WAIT and early.until == marked + graces[-1]
            clock.advance(graces[-1])
        verdict = decide_takeover(node, view(taker, seen=marked if i else None), RULES, clock.wall())
        assert verdict.action is Action.TAKE, (taker, verdict)
        assert verdict.failures == i and verdict.grace_s is not None
        graces.append(verdict.grace_s)
        marked = clock.wall()
        node = took(node, taker, marked, verdict.failures)  # its copy never answers
    assert graces == [15.0, 30.0, 60.0, 120.0, 120.0, 120.0]


def test_a_start_that_answered_spends_its_mark_and_the_count_starts_again() -> None:
    node = took(held(generation=1), "b", 0.0, failures=3)
    node = dataclasses.replace(node, served=node.generation)
    verdict = decide_takeover(node, view("c"), RULES, now=1.0)
    assert verdict.action is Action.TAKE and verdict.failures == 0 and verdict.grace_s == 15.0


def test_two_member_fleet_has_failover_off_and_says_to_add_a_third_computer() -> None:
    verdict = decide_takeover(held(), view(members=2), RULES, now=100.0)
    assert verdict.action is Action.NOTHING
    assert THIRD_COMPUTER in verdict.reason
    assert "add a third computer, even a small always-on one, for failover" in verdict.reason


def test_a_node_with_failover_off_is_never_taken() -> None:
    verdict = decide_takeover(held(failover=False), view(), RULES, now=100.0)
    assert verdict.action is Action.NOTHING and "failover is off" in verdict.reason


def test_no_majority_means_nothing_moves() -> None:
    verdict = decide_takeover(held(), view(quorum=False), RULES, now=100.0)
    assert verdict.action is Action.NOTHING and "no majority" in verdict.reason


def test_a_computer_without_room_does_not_take() -> None:
    assert decide_takeover(held(), view(room=False), RULES, now=100.0).action is Action.NOTHING


def test_a_node_no_computer_holds_is_not_placed_by_failover() -> None:
    verdict = decide_takeover(NodeShared("study", failover=True), view(), RULES, now=100.0)
    assert verdict.action is Action.NOTHING and "no computer holds" in verdict.reason


def test_the_holder_stops_its_failover_node_once_its_own_lease_deadline_passed() -> None:
    mine = held(holder="b")
    assert decide_takeover(mine, view("b", own_left=0.5), RULES, 1.0).action is Action.NOTHING
    verdict = decide_takeover(mine, view("b", own_left=0.0), RULES, 1.0)
    assert verdict.action is Action.STOP_HERE
    assert decide_takeover(mine, view("b", own_left=None), RULES, 1.0).action is Action.STOP_HERE
    not_failover = held(holder="b", failover=False)
    assert decide_takeover(not_failover, view("b", own_left=0.0), RULES, 1.0).action is Action.NOTHING


def test_a_taker_whose_clock_is_behind_counts_the_grace_from_when_it_saw_the_mark() -> None:
    # b's clock runs 60 s ahead: its mark says 160 while c's clock says 100.
    node = held(holder="b", generation=2, spent=False, at=160.0)
    assert mark_age_s(160.0, None, 100.0) == 0.0
    verdict = decide_takeover(node, view("c", seen=100.0), RULES, now=110.0)
    assert verdict.action is Action.WAIT and verdict.until == 115.0
    # ...and a clock far behind never makes a start look older than it is.
    assert mark_age_s(40.0, 100.0, 110.0) == 10.0


def test_start_grace_doubles_caps_and_never_falls_below_its_base() -> None:
    assert [start_grace(5.0, n, 60.0) for n in range(6)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert start_grace(30.0, 3, 10.0) == 30.0
    assert start_grace(5.0, 10_000, 60.0) == 60.0
