"""The host's persistent row for a node, and the statuses it moves through."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Self, TypedDict, TypeGuard

from cadre_desktop.jsontypes import JSONObject


class NodeStatus(StrEnum):
    """A node's status. A `StrEnum`: it equals its value and prints as it ("joined"), so a
    view's status reads the same in a message, a label or JSON as it did as a string."""

    #: The code creating the node owns it; no handle may exist yet.
    SPAWNING = "spawning"
    UNCLAIMED = "unclaimed"
    JOINING = "joining"
    JOINED = "joined"
    #: Given up on, or the invitation failed; only an explicit Retry brings it back.
    ERROR = "error"
    #: Held with no end: nothing starts it until someone has work for it (Resume).
    PAUSED = "paused"
    #: Held until its `wake_at` (or, with none, like paused); it wakes by itself.
    SLEEPING = "sleeping"
    #: Finished (the node said so): never started again until a person resumes or retries it.
    DONE = "done"


SUPERVISED = frozenset({NodeStatus.UNCLAIMED, NodeStatus.JOINING, NodeStatus.JOINED})
#: A node on hold: kept down on purpose, spending nothing, not a failure.
HELD = frozenset({NodeStatus.PAUSED, NodeStatus.SLEEPING, NodeStatus.DONE})


class HeldBy(StrEnum):
    """Who holds a node: a person (Pause), the node itself (its run.json), or its run conditions."""

    PERSON = "person"
    NODE = "node"
    CONDITIONS = "conditions"


@dataclass(frozen=True)
class Hold:
    """Why a node is held, by whom, since when (`at`, wall ISO) and until when (`wake_at`, wall ISO or None).

    The length of a sleep is `wake_at - at`, fixed when it was written; while
    the host runs it is measured on the monotonic clock from `at` (the
    timeline), across a restart from the wall clock, as a backoff is.
    """

    by: HeldBy
    reason: str
    at: str
    wake_at: str | None = None
    #: "node": this node's own hold (a person's Pause of it, its run.json); "host": the host holds
    #: every node (Pause all, the run conditions) and releases it when that ends.
    scope: str = "node"

    def to_row(self) -> JSONObject:
        row: JSONObject = {"by": self.by.value, "reason": self.reason, "at": self.at, "wake_at": self.wake_at}
        if self.scope != "node":
            row["scope"] = self.scope
        return row

    def same_as(self, other: Hold) -> bool:
        """The same hold, whenever it was written (its `at` aside)."""
        return (self.by, self.reason, self.wake_at, self.scope) == (other.by, other.reason, other.wake_at, other.scope)


#: A hold's scope: one node's own, or the host's (Pause all, the run conditions).
HOLD_SCOPES = ("node", "host")


def hold_from_row(what: str, raw: object) -> Hold | None:
    """A hold from JSON; one of the wrong shape raises ValueError."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        by, reason, at = raw.get("by"), raw.get("reason"), raw.get("at")
        wake_at, scope = raw.get("wake_at"), raw.get("scope", "node")
        if (isinstance(by, str) and by in {b.value for b in HeldBy} and isinstance(reason, str)
                and isinstance(at, str) and (wake_at is None or isinstance(wake_at, str))
                and isinstance(scope, str) and scope in HOLD_SCOPES):
            return Hold(by=HeldBy(by), reason=reason, at=at, wake_at=wake_at, scope=scope)
    raise ValueError(f"{what}: hold must hold by, reason, at and wake_at (and a scope of node or host)")


class NodeMode(str, Enum):
    """How the node enters a cadre, hence which secret the keyring holds for it."""

    CLAIM = "claim"
    INVITATION = "invitation"


@dataclass(frozen=True)
class RespawnInfo:
    attempts: int
    #: Wall-clock ISO-8601 time of the last attempt; it must survive host restarts.
    last_attempt_at: str


@dataclass(frozen=True)
class StartMark:
    """The host's note of the last start of a node.

    Which start it was (`attempt`, the node's start number, which only grows),
    when and by whom, how many failed starts came right before it, and what
    was seen of the last of them. A start that answers `GET /status` spends its
    mark (`answered`): the next start counts its failures from zero. The mark
    lives in the record, so it is written in the same write as the new handle
    and survives a host restart.
    """

    attempt: int
    at: str
    by: str = ""
    failures: int = 0
    last_exit: str | None = None
    answered: bool = False

    def to_row(self) -> JSONObject:
        return {"attempt": self.attempt, "at": self.at, "by": self.by, "failures": self.failures,
                "last_exit": self.last_exit, "answered": self.answered}


def next_mark(prev: StartMark | None, attempt: int, now: str, by: str, *, counted: bool,
              words: str | None) -> StartMark:
    """The mark of a new start: the failed starts right before it (a counted start after an
    unanswered one adds one; a deliberate restart neither adds nor forgives), and the last exit."""
    failed_before = prev is not None and not prev.answered
    if prev is None or not failed_before:
        failures = 0
    elif counted:
        failures = prev.failures + 1
    else:
        failures = prev.failures
    return StartMark(attempt=attempt, at=now, by=by, failures=failures,
                     last_exit=words or (prev.last_exit if prev and failed_before else None))


def mark_from_row(node_id: str, raw: object) -> StartMark | None:
    """A start mark from JSON; one of the wrong shape raises ValueError."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        attempt, at, failures = raw.get("attempt"), raw.get("at"), raw.get("failures", 0)
        by, last_exit, answered = raw.get("by", ""), raw.get("last_exit"), raw.get("answered", False)
        if (_whole(attempt) and isinstance(at, str) and _whole(failures) and isinstance(by, str)
                and (last_exit is None or isinstance(last_exit, str)) and isinstance(answered, bool)):
            return StartMark(attempt=attempt, at=at, by=by, failures=failures, last_exit=last_exit, answered=answered)
    raise ValueError(f"node {node_id!r}: start must hold attempt, at, failures, by, last_exit and answered")


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, kw_only=True)
class SupervisedRow:
    """What every supervised row has (a hosted node's record, a lent node's donation): the
    handle of its last child, its ports and peer id, its error, its respawn budget and start
    mark, its times, and the keys this build does not know. Both kinds declare, read and write
    those fields here, and only here (keyword-only, so each kind's own fields come first)."""

    #: The orchestrator handle of the child spawned last, if any.
    handle: str | None = None
    api_port: int | None = None
    p2p_port: int | None = None
    peer_id: str | None = None
    error: str | None = None
    respawn: RespawnInfo | None = None
    #: The host's note of its last start (see StartMark).
    start: StartMark | None = None
    #: Why it is held (paused, sleeping, done), while it is.
    hold: Hold | None = None
    #: What was wrong with the row as read (an unreadable start mark); never written.
    problem: str | None = None
    created_at: str = ""
    updated_at: str = ""
    #: A row's keys this build does not know, kept and written back as they were.
    extra: JSONObject = field(default_factory=dict)

    def replace(self, **changes: Any) -> Self:
        # The changes are any of the dataclass's fields, each of its own type (checked by
        # `dataclasses.replace` at run time; mypy's plugin checks only a direct call of it).
        return dataclasses.replace(self, **changes)

    @property
    def attempts(self) -> int:
        return self.respawn.attempts if self.respawn else 0

    @property
    def next_start(self) -> int:
        """The start number the next start of this node gets."""
        return (self.start.attempt if self.start else 0) + 1

    def life_row(self) -> JSONObject:
        row: JSONObject = {
            "handle": self.handle,
            "api_port": self.api_port,
            "p2p_port": self.p2p_port,
            "peer_id": self.peer_id,
            "error": self.error,
            "respawn": (
                {"attempts": self.respawn.attempts, "last_attempt_at": self.respawn.last_attempt_at}
                if self.respawn else None
            ),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if self.start is not None:
            row["start"] = self.start.to_row()
        if self.hold is not None:
            row["hold"] = self.hold.to_row()
        return row


#: The keys `SupervisedRow.life_row` writes: optional strings, optional ports, and the rest.
LIFE_STR = ("handle", "peer_id", "error")
LIFE_PORT = ("api_port", "p2p_port")
LIFE_KEYS = frozenset({"respawn", "start", "hold", "created_at", "updated_at", *LIFE_STR, *LIFE_PORT})


class LifeFields(TypedDict):
    """The shared fields of a supervised row, as keyword arguments of its dataclass."""

    handle: str | None
    api_port: int | None
    p2p_port: int | None
    peer_id: str | None
    error: str | None
    respawn: RespawnInfo | None
    start: StartMark | None
    problem: str | None
    hold: Hold | None
    created_at: str
    updated_at: str


def life_from_row(what: str, row_id: str, row: Mapping[str, object], strings: tuple[str, ...] = ()) -> LifeFields:
    """The shared fields of a row (and its own optional `strings`, checked alike) as keyword
    arguments of its dataclass; a field of the wrong shape raises ValueError."""
    check_optional(what, row, LIFE_STR + strings, LIFE_PORT)
    start, problem = None, None
    try:
        start = mark_from_row(row_id, row.get("start"))
    except ValueError as exc:
        # One unreadable start mark costs that run its grace, never the whole file (seed 003).
        problem = f"its start mark is unreadable ({exc}); its current start has no grace"
    return {
        "handle": optional_str(row, "handle"),
        "api_port": _optional_int(row, "api_port"),
        "p2p_port": _optional_int(row, "p2p_port"),
        "peer_id": optional_str(row, "peer_id"),
        "error": optional_str(row, "error"),
        "respawn": respawn_from_row(what, row.get("respawn")),
        "start": start,
        "problem": problem,
        "hold": hold_from_row(what, row.get("hold")),
        "created_at": str(row.get("created_at") or ""),
        "updated_at": str(row.get("updated_at") or ""),
    }


@dataclass(frozen=True)
class NodeRecord(SupervisedRow):
    id: str
    name: str
    status: NodeStatus
    mode: NodeMode = NodeMode.CLAIM
    cadre: str | None = None
    #: This node's own caps (None: the host's `node_cpu_percent` / `node_memory_mb`), and
    #: whether it runs whatever the run conditions say. Taken at the node's next start.
    cpu_percent: int | None = None
    memory_mb: int | None = None
    always_run: bool = False

    def to_row(self) -> JSONObject:
        row: JSONObject = {"name": self.name, "status": self.status.value, "mode": self.mode.value,
                               "cadre": self.cadre, **self.life_row()}
        # Written only when set: a row without them is what an older build wrote and reads.
        row.update({k: v for k, v in self.caps_row().items() if v not in (None, False)})
        row.update(self.extra)
        return row

    def caps_row(self) -> JSONObject:
        return {"cpu_percent": self.cpu_percent, "memory_mb": self.memory_mb, "always_run": self.always_run}


CAPS_KEYS = ("cpu_percent", "memory_mb", "always_run")
_KNOWN = {"name", "status", "mode", "cadre", *LIFE_KEYS, *CAPS_KEYS}


class CapsFields(TypedDict):
    """A record's own caps, as keyword arguments of `NodeRecord`."""

    cpu_percent: int | None
    memory_mb: int | None
    always_run: bool


def caps_from_row(what: str, row: Mapping[str, object]) -> CapsFields:
    """A record's own caps; absent is None (the host's) and false. Only the shape is checked
    here: a row is never refused for a cap the settings' bounds would now refuse."""
    for key in ("cpu_percent", "memory_mb"):
        v = row.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(f"{what}: {key} must be a positive whole number or null")
    always_run = row.get("always_run", False)
    if not isinstance(always_run, bool):
        raise ValueError(f"{what}: always_run must be true or false")
    return {"cpu_percent": _optional_int(row, "cpu_percent"), "memory_mb": _optional_int(row, "memory_mb"),
            "always_run": always_run}


#: What a node id may look like (the node program refuses any other). It names a
#: folder under `nodes/` that Remove deletes, so it must never climb out of it.
NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_node_id(node_id: object) -> TypeGuard[str]:
    return isinstance(node_id, str) and NODE_ID.fullmatch(node_id) is not None and ".." not in node_id


def check_optional(what: str, row: Mapping[str, object], strings: tuple[str, ...], ports: tuple[str, ...]) -> None:
    """The optional fields of a row (of any kind of supervised record): strings and port numbers, or null."""
    for key in strings:
        if row.get(key) is not None and not isinstance(row[key], str):
            raise ValueError(f"{what}: {key} must be a string")
    for key in ports:
        v = row.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError(f"{what}: {key} must be a port number")


def optional_str(row: Mapping[str, object], key: str) -> str | None:
    """A field `check_optional` passed as a string or null."""
    v = row.get(key)
    return v if isinstance(v, str) else None


def _optional_int(row: Mapping[str, object], key: str) -> int | None:
    """A field checked as a whole number or null (a port, a cap)."""
    v = row.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def respawn_from_row(what: str, raw: object) -> RespawnInfo | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        attempts, last_attempt_at = raw.get("attempts"), raw.get("last_attempt_at")
        if isinstance(attempts, int) and isinstance(last_attempt_at, str):
            return RespawnInfo(attempts=attempts, last_attempt_at=last_attempt_at)
    raise ValueError(f"{what}: respawn must hold attempts and last_attempt_at")


def record_from_row(node_id: str, row: object) -> NodeRecord:
    """Build a record from its JSON row; a row of the wrong shape raises ValueError."""
    if not is_node_id(node_id):
        raise ValueError(f"the node id {node_id[:80]!r} is not a valid node id")
    if not isinstance(row, dict):
        raise ValueError(f"node {node_id!r} is not an object")
    name = row.get("name")
    if not isinstance(name, str):
        raise ValueError(f"node {node_id!r} has no name")
    try:
        status = NodeStatus(str(row.get("status")))
    except ValueError:
        raise ValueError(f"node {node_id!r} has an unknown status {row.get('status')!r}") from None
    try:
        mode = NodeMode(row.get("mode", "claim"))
    except ValueError:
        raise ValueError(f"node {node_id!r} has an unknown mode {row.get('mode')!r}") from None
    return NodeRecord(
        id=node_id,
        name=name,
        status=status,
        mode=mode,
        cadre=optional_str(row, "cadre"),
        **life_from_row(f"node {node_id!r}", node_id, row, ("cadre",)),
        **caps_from_row(f"node {node_id!r}", row),
        # Keys a newer build added are carried through untouched, never dropped.
        extra={k: v for k, v in row.items() if k not in _KNOWN},
    )
