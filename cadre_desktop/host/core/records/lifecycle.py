"""The one owner of a node's life: every write of a record goes through here.

Each change of a record is a named transition with the statuses it may start
from and end in. `apply` re-reads the record, checks the transition is
allowed from what is on disk *now*, writes, and emits the event, in one place
and with no await in between (the store is synchronous on purpose; with the
host's writer, a `GROUPED` transition's write is synced on the writer's thread
and its event told after that sync, every event in the order of its transition). A record
that was removed or moved on while its caller awaited is left alone and
`apply` returns None: the caller's work is abandoned, never written over the
newer truth. Two transitions write nothing (`exited`, `waiting`): what they
report lives in the driver and the keyring gate, and they only tell the views.

A transition whose *result* leaves its allowed statuses is a bug in the
caller and raises.

Hosted nodes are one *kind* of supervised record; a node lent to another
cadre is another (host/lending/kind.py). A `RecordKind` says what differs: its
statuses and their table, its secret, how it is announced. Everything else
(this module, the supervisor, the decision, the probe) is the same code for
both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Protocol, Self, TypeVar

from cadre_desktop.errors import Bug
from cadre_desktop.host.core.clock import Clock, stamp
from cadre_desktop.host.core.events import EventBus, EventKind
from cadre_desktop.host.core.records.records import HELD, SUPERVISED, Hold, NodeMode, NodeRecord, NodeStatus, RespawnInfo, StartMark
from cadre_desktop.host.core.records.rowstore import RowStore
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.settings import Settings

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
    #: Lent nodes: the node answered and waits for its seed; the seed was taken.
    AWAITING_SEED = "awaiting-seed"
    SEEDED = "seeded"
    #: A person set the node's own caps or `always_run` (taken at its next start).
    CAPS = "caps"
    #: Holds: a person pauses (or puts to sleep) a node; the node holds itself (its run.json);
    #: a sleeping node wakes at its time; a person resumes a held node (the seed's demand).
    PAUSE = "pause"
    HOLD = "hold"
    WAKE = "wake"
    RESUME = "resume"


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
    Change.RETRY: (frozenset({S.ERROR, S.DONE}), SUPERVISED),
    Change.EXITED: (_ANY, _ANY),
    Change.WAITING: (SUPERVISED, SUPERVISED),
    Change.CAPS: (_ANY - {S.SPAWNING}, _ANY - {S.SPAWNING}),
    Change.PAUSE: (SUPERVISED | HELD, frozenset({S.PAUSED, S.SLEEPING})),
    Change.HOLD: (SUPERVISED, HELD),
    Change.WAKE: (frozenset({S.SLEEPING}), SUPERVISED),
    Change.RESUME: (HELD, SUPERVISED),
    # Lent nodes' news; a hosted node never has it.
    Change.AWAITING_SEED: (frozenset(), frozenset()),
    Change.SEEDED: (frozenset(), frozenset()),
}

#: What each kind of hold is in a hosted node's statuses (a kind without holds has none).
HOSTED_HOLDS = {"paused": S.PAUSED, "sleeping": S.SLEEPING, "done": S.DONE}

#: Transitions that report something outside the record: an event, no write.
EVENT_ONLY = frozenset({Change.EXITED, Change.WAITING})

#: Transitions that never back an answer to anyone, only an event: what the supervisor and
#: the probe learn of a node. With a writer, their write is grouped off the loop
#: (`RowStore.put_soon`) and their event told once it is synced, as is a start the pass
#: makes (`apply(..., soon=True)`); every other write is waited for (a Retry's start, a pause).
GROUPED = frozenset({Change.ANSWERED, Change.REFILL, Change.JOINED, Change.PEER, Change.AWAITING_SEED})


def _announce_hosted(events: EventBus, change: Change, before: NodeRecord, after: NodeRecord, detail: str) -> None:
    node_id = after.id
    if change is Change.SPAWNED:
        events.emit(EventKind.ADDED, node_id)
        return
    events.emit(EventKind.CHANGED, node_id)
    if change is Change.EXITED:
        events.emit(EventKind.EXITED, node_id, detail)
    elif change in (Change.GIVE_UP, Change.INVITATION_FAILED):
        events.emit(EventKind.GAVE_UP, node_id, detail or (after.error or ""))
    elif change is Change.JOINED and before.status is not S.JOINED:
        events.emit(EventKind.CLAIMED, node_id, after.cadre or "")
    elif change in (Change.PAUSE, Change.HOLD):
        events.emit(EventKind.HELD, node_id, after.hold.reason if after.hold else "")
    elif change in (Change.WAKE, Change.RESUME) or (change is Change.RETRY and before.status is S.DONE):
        events.emit(EventKind.RESUMED, node_id, change.value)


def _hosted_secret_kind(record: NodeRecord) -> SecretKind:
    return SecretKind.CLAIM if record.mode is NodeMode.CLAIM else SecretKind.INVITATION


def _hosted_secret_env(record: NodeRecord, value: str, host_token: str | None = None) -> dict[str, str]:
    """What a start adds to the node contract's environment: the secret, the name, the host's token.

    The host token (node contract §1) is made anew for each start and kept in
    this process's memory only: it lets the host mint an invitation from a
    node it runs, over loopback, with no owner token to copy.
    """
    var = "CADRE_CLAIM_SECRET" if record.mode is NodeMode.CLAIM else "CADRE_INVITATION"
    env = {var: value, "CADRE_NODE_NAME": record.name}
    if host_token:
        env["CADRE_HOST_TOKEN"] = host_token
    return env


def _hosted_retry(record: NodeRecord, now: str) -> dict[str, Any]:
    if record.mode is NodeMode.CLAIM:
        return {"status": S.JOINED if record.cadre else S.UNCLAIMED}
    return {"status": S.JOINED if record.cadre else S.JOINING}


#: What a kind may do with what one of its children answers on /status:
#: (its lifecycle, the record's id, the child's handle, the answer).
StatusTaker = Callable[["AnyLife", str, str, dict[str, Any]], None]


class RecordKind(Protocol):
    """What one kind of supervised record is: its statuses, table, secret and events.

    Hosted nodes (`HostedKind`, here) and lent nodes (`host/lending/kind.py`) are the two
    kinds; the lifecycle, the supervisor, the decision and the probe are shared, and ask
    the kind only what differs. A record is typed `Any` here: each kind knows its own.
    """

    #: Words for one record of this kind, in messages ("node", "lent node").
    noun: str
    transitions: Mapping[Change, tuple[frozenset[Enum], frozenset[Enum]]]
    #: What the supervisor keeps running, and what the probe reads (a superset).
    supervised: frozenset[Enum]
    probed: frozenset[Enum]
    #: The status a record is created in (the code creating it owns it), and the given-up one.
    creating: Enum
    error: Enum
    removed_event: EventKind
    #: Takes what a child of this kind answers on /status (None: the probe's own, for hosted nodes).
    on_status: StatusTaker | None
    #: Its hold statuses by name ("paused", "sleeping", "done"); empty: this kind is never held.
    holds: Mapping[str, Enum]
    #: The same statuses, as a set.
    held: frozenset[Enum]

    def announce(self, events: EventBus, change: Change, before: Any, after: Any, detail: str) -> None:
        """Emit the events of one transition."""
        ...

    def secret_kind(self, record: Any) -> SecretKind:
        """The keyring entry a start of this record needs."""
        ...

    def secret_env(self, record: Any, secret: str, host_token: str | None = None) -> dict[str, str]:
        """The variables a start adds to the node's environment."""
        ...

    def retry(self, record: Any, now: str) -> dict[str, Any]:
        """The fields a Retry sets (the status it comes back in, at least)."""
        ...

    def label(self, record: Any) -> str:
        """A person's name for a record."""
        ...

    def cannot_start(self, record: Any) -> str | None:
        """Why a record cannot be started again from what it holds, or None."""
        ...

    def settings(self, settings: Settings) -> Settings:
        """The settings its supervision uses (lent nodes have keys of their own)."""
        ...


class HostedKind:
    """A node this host runs for its own person's cadre."""

    noun = "node"
    transitions: Mapping[Change, tuple[frozenset[Enum], frozenset[Enum]]] = TRANSITIONS
    supervised: frozenset[Enum] = SUPERVISED
    probed: frozenset[Enum] = SUPERVISED
    creating: Enum = S.SPAWNING
    error: Enum = S.ERROR
    removed_event = EventKind.REMOVED
    on_status: StatusTaker | None = None
    holds: Mapping[str, Enum] = HOSTED_HOLDS
    held: frozenset[Enum] = frozenset(HOSTED_HOLDS.values())

    # The hosted nodes' own functions, called straight (no method in between).
    announce = staticmethod(_announce_hosted)
    secret_kind = staticmethod(_hosted_secret_kind)
    secret_env = staticmethod(_hosted_secret_env)

    def retry(self, record: Any, now: str) -> dict[str, Any]:
        return _hosted_retry(record, now)

    def label(self, record: Any) -> str:
        return str(record.name)

    def cannot_start(self, record: Any) -> str | None:
        return None

    def settings(self, settings: Settings) -> Settings:
        return settings


HOSTED: RecordKind = HostedKind()


class Supervised(Protocol):
    """What the lifecycle and the supervision read of a record of any kind (a node's record, a lent
    node's donation): its id, status and times, and the fields of `records.SupervisedRow`."""

    @property
    def id(self) -> str: ...

    @property
    def created_at(self) -> str: ...

    @property
    def status(self) -> Enum: ...

    @property
    def handle(self) -> str | None: ...

    @property
    def api_port(self) -> int | None: ...

    @property
    def p2p_port(self) -> int | None: ...

    @property
    def peer_id(self) -> str | None: ...

    @property
    def error(self) -> str | None: ...

    @property
    def respawn(self) -> RespawnInfo | None: ...

    @property
    def start(self) -> StartMark | None: ...

    @property
    def hold(self) -> Hold | None: ...

    @property
    def problem(self) -> str | None: ...

    @property
    def attempts(self) -> int: ...

    @property
    def next_start(self) -> int: ...

    def replace(self, **changes: Any) -> Self: ...

    def to_row(self) -> JSONObject: ...


R = TypeVar("R", bound=Supervised)
R_co = TypeVar("R_co", bound=Supervised, covariant=True)


class Life(Protocol[R_co]):
    """What the supervision room calls on one kind's lifecycle: read-only in the row, so a
    `Lifecycle[NodeRecord]` and a `Lifecycle[Donation]` are both a `Life[Supervised]`."""

    @property
    def kind(self) -> RecordKind: ...

    @property
    def clock(self) -> Clock: ...

    def get(self, node_id: str) -> R_co | None: ...

    def rows(self) -> Sequence[R_co]: ...

    def pending_removals(self) -> list[str]: ...

    def apply(self, node_id: str, change: Change, update: Callable[[R_co], Supervised] = ..., *,
              handle: str | None = None, detail: str = "", soon: bool = False) -> R_co | None: ...

    def remembered_ports(self, node_id: str) -> set[int]: ...


#: A lifecycle of any kind of record, as the supervision sees it.
AnyLife = Life[Supervised]


@dataclass
class _Told:
    """One transition's event: told once `ready` (its write synced)."""

    ready: bool
    tell: Callable[[], None]


class Lifecycle(Generic[R]):
    """The one writer of one kind's records (`kind`), in `store`."""

    def __init__(self, *, store: RowStore[R], events: EventBus, clock: Clock, kind: RecordKind = HOSTED) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.kind = kind
        #: The lifecycles of the other kinds on this host, whose ports this one keeps clear of.
        self.neighbours: list[AnyLife] = []
        #: Events in the order their transitions happened: one whose write is not synced yet
        #: holds back those after it.
        self._told: deque[_Told] = deque()

    def get(self, node_id: str) -> R | None:
        return self.store.get(node_id)

    def rows(self) -> list[R]:
        return self.store.list()

    def pending_removals(self) -> list[str]:
        return self.store.pending_removals()

    def apply(
        self,
        node_id: str,
        change: Change,
        update: Callable[[R], Supervised] = lambda r: r,
        *,
        handle: str | None = None,
        detail: str = "",
        soon: bool = False,
    ) -> R | None:
        """Re-read, check, write and announce one transition; None when it no longer applies.

        `handle`, when given, must still be the record's child: news about a
        replaced child is never applied to its successor. `soon`: the write backs no
        answer (as a `GROUPED` change's never does), so the caller does not wait for it.
        """
        current = self.store.get(node_id)
        if current is None:
            return None
        allowed_from, allowed_to = self.kind.transitions[change]
        if current.status not in allowed_from:
            return None
        if handle is not None and current.handle != handle:
            return None
        if change in EVENT_ONLY:
            self._tell(lambda: self.kind.announce(self.events, change, current, current, detail))
            return current
        changed = update(current)
        if not isinstance(changed, type(current)):
            raise Bug(f"{change.value} made node {node_id} another kind of record")
        if changed.status not in allowed_to:
            raise Bug(f"{change.value} may not leave node {node_id} {changed.status.value}")
        if changed != current:  # nothing new is announced but never written
            changed = changed.replace(updated_at=stamp(self.clock))
            if (soon or change in GROUPED) and self.store.grouped:
                told = self._tell(lambda: self.kind.announce(self.events, change, current, changed, detail), ready=False)
                self.store.put_soon(changed, lambda error: self._ready(told))
                return changed
            self.store.put(changed)
        self._tell(lambda: self.kind.announce(self.events, change, current, changed, detail))
        return changed

    def _tell(self, tell: Callable[[], None], *, ready: bool = True) -> _Told:
        """Tell now, or once every earlier transition's write is synced (order kept)."""
        told = _Told(ready, tell)
        self._told.append(told)
        self._drain()
        return told

    def _ready(self, told: _Told) -> None:
        told.ready = True
        self._drain()

    def _drain(self) -> None:
        while self._told and self._told[0].ready:
            self._told.popleft().tell()

    def create(self, record: R) -> None:
        """The first write of a node (status `spawning`); no event: nobody sees it yet."""
        if record.status is not self.kind.creating or self.store.get(record.id) is not None:
            raise Bug(f"node {record.id} cannot be created as {record.status.value}")
        self.store.put(record)

    def mark_removed(self, node_id: str, *, announce_unborn: bool = False) -> bool:
        """Delete the record, leaving a tombstone until its clean-up is done.

        A node still being created was never announced, so its removal is not
        either (unless an earlier run left it behind, and views may show it).
        """
        record = self.store.get(node_id)
        existed = self.store.mark_removed(node_id, stamp(self.clock))
        if existed and (announce_unborn or record is None or record.status is not self.kind.creating):
            self._tell(lambda: self.events.emit(self.kind.removed_event, node_id))
        return existed

    def mark_orphan_removed(self, node_id: str) -> None:
        """An orphan's id (a live child no record names) to clean up as a removal: its tombstone."""
        self.store.mark_orphan_removed(node_id, stamp(self.clock))

    def drop_unborn(self, node_id: str) -> None:
        """Delete a `spawning` row that never got anything (its secret was refused)."""
        self.store.remove(node_id)

    def removal_done(self, node_id: str) -> None:
        self.store.removal_done(node_id)

    def remembered_ports(self, node_id: str) -> set[int]:
        """Ports other nodes will want back when they start again (their claim URLs name them).

        Those of every kind: a hosted node never takes a lent node's ports, nor the other way round.
        """
        kinds: list[AnyLife] = [self, *self.neighbours]
        rows: list[Supervised] = [r for lc in kinds for r in lc.rows()]
        return {p for r in rows if r.id != node_id for p in (r.api_port, r.p2p_port) if p}

