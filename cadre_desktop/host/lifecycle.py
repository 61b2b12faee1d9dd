"""The one owner of a node's life: every write of a record goes through here.

Each change of a record is a named transition with the statuses it may start
from and end in. `apply` re-reads the record, checks the transition is
allowed from what is on disk *now*, writes, and emits the event, in one place
and with no await in between (the store is synchronous on purpose). A record
that was removed or moved on while its caller awaited is left alone and
`apply` returns None: the caller's work is abandoned, never written over the
newer truth. Two transitions write nothing (`exited`, `waiting`): what they
report lives in the driver and the keyring gate, and they only tell the views.

A transition whose *result* leaves its allowed statuses is a bug in the
caller and raises.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Callable

from cadre_desktop.errors import CadreError
from cadre_desktop.host.clock import Clock, iso
from cadre_desktop.host.events import EventBus, EventKind
from cadre_desktop.host.records import SUPERVISED, NodeRecord, NodeStatus
from cadre_desktop.host.store import RecordStore

log = logging.getLogger(__name__)

S = NodeStatus
_ANY = frozenset(NodeStatus)


class Change(str, Enum):
    CREATE = "create"
    SPAWNED = "spawned"
    STARTED = "started"
    START_FAILED = "start-failed"
    ADOPT = "adopt"
    ANSWERED = "answered"
    REFILL = "refill"
    JOINED = "joined"
    PEER = "peer"
    INVITATION_FAILED = "invitation-failed"
    GIVE_UP = "give-up"
    RETRY = "retry"
    EXITED = "exited"
    WAITING = "waiting"


#: change -> (statuses it may start from, statuses it may end in). The one table of a node's life.
TRANSITIONS: dict[Change, tuple[frozenset[NodeStatus], frozenset[NodeStatus]]] = {
    Change.CREATE: (frozenset(), frozenset({S.SPAWNING})),
    Change.SPAWNED: (frozenset({S.SPAWNING}), frozenset({S.UNCLAIMED, S.JOINING})),
    Change.STARTED: (SUPERVISED, SUPERVISED),
    Change.START_FAILED: (SUPERVISED, SUPERVISED),
    Change.ADOPT: (SUPERVISED, SUPERVISED),
    Change.ANSWERED: (SUPERVISED, SUPERVISED),
    Change.REFILL: (SUPERVISED, SUPERVISED),
    Change.JOINED: (SUPERVISED, frozenset({S.JOINED})),
    Change.PEER: (SUPERVISED, SUPERVISED),
    Change.INVITATION_FAILED: (frozenset({S.JOINING}), frozenset({S.ERROR})),
    Change.GIVE_UP: (SUPERVISED, frozenset({S.ERROR})),
    Change.RETRY: (frozenset({S.ERROR}), SUPERVISED),
    Change.EXITED: (_ANY, _ANY),
    Change.WAITING: (SUPERVISED, SUPERVISED),
}

#: Transitions that report something outside the record: an event, no write.
EVENT_ONLY = frozenset({Change.EXITED, Change.WAITING})


class Lifecycle:
    def __init__(self, *, store: RecordStore, events: EventBus, clock: Clock) -> None:
        self.store = store
        self.events = events
        self.clock = clock

    def get(self, node_id: str) -> NodeRecord | None:
        return self.store.get(node_id)

    def apply(
        self,
        node_id: str,
        change: Change,
        update: Callable[[NodeRecord], NodeRecord] = lambda r: r,
        *,
        handle: str | None = None,
        detail: str = "",
    ) -> NodeRecord | None:
        """Re-read, check, write and announce one transition; None when it no longer applies.

        `handle`, when given, must still be the record's child: news about a
        replaced child is never applied to its successor.
        """
        current = self.store.get(node_id)
        if current is None:
            return None
        allowed_from, allowed_to = TRANSITIONS[change]
        if current.status not in allowed_from:
            return None
        if handle is not None and current.handle != handle:
            return None
        if change in EVENT_ONLY:
            self._announce(change, current, current, detail)
            return current
        changed = update(current)
        if changed.status not in allowed_to:
            raise AssertionError(f"{change.value} may not leave node {node_id} {changed.status.value}")
        if changed != current:  # nothing new is announced but never written
            changed = changed.replace(updated_at=iso(self.clock.now()))
            self.store.put(changed)
        self._announce(change, current, changed, detail)
        return changed

    def create(self, record: NodeRecord) -> None:
        """The first write of a node (status `spawning`); no event: nobody sees it yet."""
        if record.status is not S.SPAWNING or self.store.get(record.id) is not None:
            raise AssertionError(f"node {record.id} cannot be created as {record.status.value}")
        self.store.put(record)

    def mark_removed(self, node_id: str, *, announce_unborn: bool = False) -> bool:
        """Delete the record, leaving a tombstone until its clean-up is done.

        A node still being created was never announced, so its removal is not
        either (unless an earlier run left it behind, and views may show it).
        """
        record = self.store.get(node_id)
        existed = self.store.mark_removed(node_id, iso(self.clock.now()))
        if existed and (announce_unborn or record is None or record.status is not S.SPAWNING):
            self.events.emit(EventKind.REMOVED, node_id)
        return existed

    def drop_unborn(self, node_id: str) -> None:
        """Delete a `spawning` row that never got anything (its secret was refused)."""
        self.store.remove(node_id)

    def removal_done(self, node_id: str) -> None:
        self.store.removal_done(node_id)

    def remembered_ports(self, node_id: str) -> set[int]:
        """Ports other nodes will want back when they start again (their claim URLs name them)."""
        return {p for r in self.store.list() if r.id != node_id for p in (r.api_port, r.p2p_port) if p}

    def _announce(self, change: Change, before: NodeRecord, after: NodeRecord, detail: str) -> None:
        node_id = after.id
        if change is Change.SPAWNED:
            self.events.emit(EventKind.ADDED, node_id)
            return
        self.events.emit(EventKind.CHANGED, node_id)
        if change is Change.EXITED:
            self.events.emit(EventKind.EXITED, node_id, detail)
        elif change in (Change.GIVE_UP, Change.INVITATION_FAILED):
            self.events.emit(EventKind.GAVE_UP, node_id, detail or (after.error or ""))
        elif change is Change.JOINED and before.status is not S.JOINED:
            self.events.emit(EventKind.CLAIMED, node_id, after.cadre or "")


def write_failed(node_id: str, change: Change, exc: CadreError) -> None:
    """Log a transition whose write failed; the caller decides what that means."""
    log.error("node %s: could not record %s: %s", node_id, change.value, exc.message)
