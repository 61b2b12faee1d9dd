"""The take-over decision: (a node's shared state, what this computer sees, now) -> verdict.

Pure on purpose, like the supervisor's `decide()` (host/core/supervision/decide.py): no
store, no clock, no driver. The caller reads the node's keys and the holder's lease from
the store (`shared.py`), says what it knows of itself (`FleetView`), passes `now` from its
clock, and carries the verdict out: a `TAKE` through `SharedState.take` with the verdict's
`expected` and `holder` (a lost race changes nothing and is no error), after stopping the
lost holder where it can be reached, bounded. Every rule is a line of `decide_takeover`'s
docstring, in the order checked, and each has a unit test on a fake clock.

Seed 003's rules, across computers: a holder's lease that expired (its computer asleep,
unplugged, crashed or cut off) loses the node; every take writes a start mark with the new
generation; inside a start's grace nothing is taken; a start that never answered is a
failed start, and the next take counts it, so its grace doubles per consecutive failure up
to a cap (the backoff, whichever computer made the failed start); two takers racing for a
node are safe because the store's transaction admits one.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from cadre_desktop.host.fleetstate.shared import NodeShared

#: What a two-computer fleet is told (the issue's words, also shown in the window).
THIRD_COMPUTER = "add a third computer, even a small always-on one, for failover"


class Action(str, enum.Enum):
    TAKE = "take"
    WAIT = "wait"
    NOTHING = "nothing"
    STOP_HERE = "stop-here"


@dataclass(frozen=True)
class TakeoverRules:
    #: The grace of a start with no failed start before it (seed 003's default: the lease time).
    start_grace_s: float = 15.0
    #: The cap on a backed-off grace.
    start_grace_max_s: float = 600.0
    #: Failover needs a majority that survives the loss of one member: three members at least.
    min_members: int = 3


@dataclass(frozen=True)
class FleetView:
    """What this computer knows as it decides about one node."""

    #: This computer's id.
    me: str
    #: Members of the fleet's etcd cluster.
    members: int
    #: The store answered a linearizable read just now: a majority of its members is up.
    quorum: bool
    #: This computer has room for one more node (its caps, its run conditions, a person's pause).
    room: bool
    #: The holder's lease key is still in the store (its lease has not expired).
    holder_lease_alive: bool
    #: Seconds until this computer's own lease deadline (`LeaseKeeper.deadline_ns`); None: no lease.
    own_lease_left_s: float | None = None
    #: When this computer first saw the node's current start mark, on its clock (None: not seen before).
    mark_seen_at: float | None = None


@dataclass(frozen=True)
class TakeoverVerdict:
    action: Action
    reason: str
    #: WAIT: when to look again (this computer's clock).
    until: float | None = None
    #: TAKE: the generation and holder the transaction compares (the holder: stop it where reachable).
    expected: int = 0
    holder: str | None = None
    #: TAKE: the failed starts right before this one and what was seen of the last, for its mark.
    failures: int = 0
    last_exit: str | None = None
    #: TAKE: the grace this start gets (the base doubled per failure, capped).
    grace_s: float | None = None


def start_grace(base_s: float, failures: int, max_s: float) -> float:
    """The grace of a start that follows `failures` failed ones: the base doubled per failure,
    capped by `max_s`, never below the base."""
    if failures <= 0:
        return base_s
    return max(base_s, min(math.ldexp(base_s, min(failures, 32)), max_s))


def mark_age_s(at: float, seen_at: float | None, now: float) -> float:
    """How old a start mark is, as this computer may safely count it. The mark's own time is
    the taker's wall clock; when this computer saw the mark appear (`seen_at`, its own
    clock) the start had already begun, so counting from then never makes a start older than
    it is, whatever the two clocks disagree by. Without `seen_at` (this host has just started)
    the mark's time, never in the future."""
    start = seen_at if seen_at is not None else min(at, now)
    return max(0.0, now - start)


def decide_takeover(node: NodeShared, view: FleetView, rules: TakeoverRules, now: float) -> TakeoverVerdict:
    """Whether this computer should take `node` over now. The rules, in the order checked:

    1. This computer holds the node: nothing, unless the node has failover on and this
       computer's own lease deadline has passed (or it has none): STOP_HERE, since another
       computer may take the node once the lease expires, and a node must never serve twice.
    2. The store answered no linearizable read (no majority reachable from here): nothing;
       the node stays where it is.
    3. No computer holds the node (generation 0): nothing. A node is placed by its making
       or a move, never by failover.
    4. Failover is off for the node: nothing (a node with failover off behaves as today).
    5. The fleet's store has fewer than three members: nothing, "add a third computer, even
       a small always-on one, for failover" (with two, the loss of either is the loss of the
       majority, so no failover could ever be decided safely).
    6. The holder's lease is alive: nothing; the holder runs the node (or is starting it).
    7. No room on this computer: nothing; another computer with room may take it.
    8. The start mark is not spent (its generation never answered) and is younger than its
       grace (the base doubled per failed start before it, capped): WAIT until the grace
       ends. A start in flight is never taken over, whoever made it.
    9. Otherwise TAKE, comparing the generation and holder just read. A mark not spent is a
       failed start: the take counts it (`failures` = the mark's + 1, `last_exit` says it
       never answered), so the new start's grace is doubled (the backoff, across computers);
       a spent mark starts the count again from 0. Of two computers taking at once, the
       store's transaction admits one; the other's take finds the new generation and does
       nothing, and its next decision sees the winner's lease alive (rule 6).
    """
    if node.holder == view.me:
        if node.failover and (view.own_lease_left_s is None or view.own_lease_left_s <= 0):
            return TakeoverVerdict(Action.STOP_HERE, "this computer's lease could have expired:"
                                   " the node stops here before another computer may take it")
        return TakeoverVerdict(Action.NOTHING, "the node is held by this computer")
    if not view.quorum:
        return TakeoverVerdict(Action.NOTHING, "the fleet's store has no majority reachable from here:"
                               " the node stays where it is")
    if node.holder is None or node.generation == 0:
        return TakeoverVerdict(Action.NOTHING, "no computer holds the node: it is placed by its making or a move")
    if not node.failover:
        return TakeoverVerdict(Action.NOTHING, "failover is off for this node")
    if view.members < rules.min_members:
        return TakeoverVerdict(Action.NOTHING, f"failover is off with {view.members} computer(s): {THIRD_COMPUTER}")
    if view.holder_lease_alive:
        return TakeoverVerdict(Action.NOTHING, f"held by {node.holder}, whose lease is alive")
    if not view.room:
        return TakeoverVerdict(Action.NOTHING, "no room on this computer for another node")
    mark = node.mark
    if mark is not None and not node.mark_spent:
        grace = start_grace(rules.start_grace_s, mark.failures, rules.start_grace_max_s)
        age = mark_age_s(mark.at, view.mark_seen_at, now)
        if age < grace:
            return TakeoverVerdict(Action.WAIT, f"the start of generation {mark.generation} by {mark.by} is in its"
                                   f" grace ({grace:g} s, {mark.failures} failed start(s) before it)",
                                   until=now + (grace - age))
        failures = mark.failures + 1
        last_exit = f"the start of generation {mark.generation} on {mark.by} never answered within {grace:g} s"
    else:
        failures, last_exit = 0, None
    return TakeoverVerdict(Action.TAKE, f"{node.holder}'s lease expired", expected=node.generation,
                           holder=node.holder, failures=failures, last_exit=last_exit,
                           grace_s=start_grace(rules.start_grace_s, failures, rules.start_grace_max_s))
