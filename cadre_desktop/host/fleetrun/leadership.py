"""Where the fleet's etcd leader runs: off the computers that hold failover nodes, when it can be.

When the computer whose member leads the cluster goes (asleep, frozen, cut off), the member
elected after it renews every lease to its whole time (etcd 3.5's lessor does so on taking the
lead, and its lease checkpoints come every 5 minutes), so that computer's own lease ends an
election *plus* a lease after it went, not a lease after its last renewal: its failover nodes
would wait that much longer to serve elsewhere. A holder whose member only follows costs no
election: its lease ends on time. So the leader is kept on the computer that holds the fewest
failover nodes: a computer whose member leads and which holds some hands the leadership
(etcd's `MoveLeader`, bounded) to the voting member of an alive computer holding fewer (the
fewest, then the smallest id). Only ever to one holding strictly fewer, so it never goes back
and forth; with every computer holding as many, it stays where it is.

A hand-over is itself a leader change (every lease renewed to its whole time, a moment with no
leader), so it is made only in a calm fleet: every voting member's computer alive (a cluster
short of a member is left as it is: a hand-over then could leave it with no leader for longer),
and what each computer holds unchanged for `PLACE_S` (not in the middle of a failover).
Looked at after each failover pass, at most every `PLACE_S`, and only by a computer that holds a
failover node (the others have nothing to hand over): at idle one status call (answered by a
member on its own, no Raft round) every `PLACE_S` on each such computer; the member list is
read again only when the leader is a member it does not name.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet

from cadre_desktop.host.fleetstate.client import FleetClient, MemberInfo
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.shared import NodeShared

log = logging.getLogger(__name__)

#: How often the leader's place is looked at when nothing changed (a leader elected after a
#: failure may have landed on a holder).
PLACE_S = 10.0


def held_counts(nodes: Iterable[NodeShared]) -> dict[str, int]:
    """How many failover nodes each computer holds, as the shared state says."""
    held: dict[str, int] = {}
    for shared in nodes:
        if shared.failover and shared.holder is not None:
            held[shared.holder] = held.get(shared.holder, 0) + 1
    return held


def leader_target(me: str, held: Mapping[str, int], alive: AbstractSet[str], voters: Mapping[str, int]) -> int | None:
    """The member to hand this computer's leadership to, or None to keep it.

    `held`: failover nodes per computer; `alive`: computers whose lease is alive; `voters`: each
    voting member's id by its computer's name (learners cannot lead). None unless every voter's
    computer is alive."""
    mine = held.get(me, 0)
    if mine == 0 or any(name not in alive for name in voters):
        return None
    fewest = min(((held.get(name, 0), name) for name in voters if name != me and name in alive), default=None)
    if fewest is None or fewest[0] >= mine:
        return None
    return voters[fewest[1]]


class LeaderPlacement:
    """Hands the leadership on when this computer leads and holds more failover nodes than another."""

    def __init__(self, *, me: Callable[[], str], client: Callable[[], FleetClient | None],
                 own: Callable[[], FleetClient | None], alive: Callable[[], Awaitable[AbstractSet[str]]],
                 every_s: float = PLACE_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._me, self._client, self._own, self._alive = me, client, own, alive
        self._every_s, self._monotonic = every_s, monotonic
        #: What each computer held at the last look, since when; when the last look asked the store.
        self._held: tuple[dict[str, int], float] | None = None
        self._asked_at: float | None = None
        self._members: list[MemberInfo] = []
        #: Handed on (to the member of `moved_to`) by this computer, for the logs and tests.
        self.moves = 0
        self.moved_to: str | None = None

    async def check(self, held: Mapping[str, int]) -> None:
        """Look (when due) and hand the leadership on if it should go. Bounded; a store that does not
        answer leaves it where it is until the next look."""
        me, now = self._me(), self._monotonic()
        if self._held is None or self._held[0] != held:
            self._held = (dict(held), now)
        if held.get(me, 0) == 0 or now - self._held[1] < self._every_s:
            return  # nothing to hand over, or the holdings are still moving
        if self._asked_at is not None and now - self._asked_at < self._every_s:
            return
        self._asked_at = now
        client = self._client()
        if client is None:
            return
        try:
            _, leader = await client.status()
            if leader not in {m.id for m in self._members}:
                self._members = await client.members()
            members = self._members
            if next((m.name for m in members if m.id == leader), None) != me:
                return
            members = self._members = await client.members()  # fresh for the choice (who votes now)
            voters = {m.name: m.id for m in members if m.name and not m.learner}
            target = leader_target(me, held, await self._alive(), voters)
            if target is None:
                return
            own = self._own()
            if own is None:
                return
            try:
                await own.move_leader(target)
            finally:
                with contextlib.suppress(StoreUnavailable):
                    await own.close()
        except StoreUnavailable as exc:
            log.info("fleet store: the leader's place was not looked at (%s)", exc.message)
            return
        self.moves += 1
        self.moved_to = next(m.name for m in members if m.id == target)
        log.info("fleet store: the cluster's leadership is handed to %s's member (this computer holds %d failover"
                 " node(s), it %d)", self.moved_to, held.get(me, 0), held.get(self.moved_to, 0))
