"""What a computer remembers of the failover nodes held elsewhere, for the take-over decision.

Three things, each per node: when this computer first saw the node's current start mark (a
start's grace is counted from then, on this computer's clock: `takeover.mark_age_s`); since when
it has seen the node's holder, at its generation, without a lease (the fallback taker's two lease
times, on the monotonic clock); and why it last did not take the node (logged once until it
changes, so a person reading the log learns why a node waits).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet

from cadre_desktop.host.fleetstate.shared import NodeShared

log = logging.getLogger(__name__)


class TakerNotes:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._seen_marks: dict[str, tuple[int, float]] = {}
        #: Per node held elsewhere: (its holder, generation) and since when its lease has been seen gone.
        self.dead_since: dict[str, tuple[tuple[str | None, int], float]] = {}
        #: Per node: why it was last not taken here.
        self.why: dict[str, str] = {}

    def mark_seen_at(self, shared: NodeShared, now: float) -> float | None:
        """When this computer first saw the node's current start mark (`now` the first time); None: no mark."""
        mark = shared.mark
        if mark is None:
            return None
        seen = self._seen_marks.get(shared.node)
        if seen is None or seen[0] != mark.generation:
            self._seen_marks[shared.node] = seen = (mark.generation, now)
        return seen[1]

    def lost_for(self, shared: NodeShared, alive: AbstractSet[str]) -> float:
        """How long this computer has seen the node's holder (at this generation) without a lease: the
        first choice of taker may hold no replica (it was away when it was sent), so after two lease
        times any computer with one takes (the transaction admits one). Counted on the monotonic
        clock, per holder and generation: a wall clock's step, or an earlier failover's count, moves nothing."""
        if shared.holder in alive:
            self.dead_since.pop(shared.node, None)
            return 0.0
        now, key = self._monotonic(), (shared.holder, shared.generation)
        seen = self.dead_since.get(shared.node)
        if seen is None or seen[0] != key:
            self.dead_since[shared.node] = seen = (key, now)
        return now - seen[1]

    def say_why(self, node_id: str, words: str) -> None:
        """Why a node whose holder lost its lease is not taken here: logged once until it changes."""
        if self.why.get(node_id) != words:
            self.why[node_id] = words
            log.info("failover: node %s, whose holder's lease is gone, is not taken here: %s", node_id, words)
