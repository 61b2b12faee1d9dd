"""What a node remembers across respawns: its cadre, owners, members, invitations, seed.

One JSON document, ``node-state.json`` in the work folder, with a ``version``. It is
only ever replaced whole (see :mod:`cadre_desktop.files.atomicfile`), and only through
:meth:`StateStore.update`, which applies a change to a copy, writes the copy and only
then makes it current: a failed write leaves both the file and the running node as
they were. A present-but-unreadable file stops the node (exit code 5) and is never
overwritten, because it may be the only record of who owns this node.

Secrets are never stored: owner tokens and invitation secrets appear only as
SHA-256 hex digests.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cadre_desktop.files.atomicfile import write_bytes_atomic
from cadre_desktop.node.errors import CorruptFileError, NodeDirError, StorageError

STATE_FILE = "node-state.json"
STATE_VERSION = 1
T = TypeVar("T")


@dataclass
class Membership:
    """This node's place in a cadre."""

    cadre: str
    via: str  # "claim" or "invitation"
    joined_at: float  # epoch seconds
    inviter: str | None = None  # the inviting node's peer id, when via invitation


@dataclass
class Member:
    """A peer this node admitted into its cadre (itself included, when claimed)."""

    peer_id: str
    joined_at: float
    via: str  # "claim" or "invitation"


@dataclass
class Invitation:
    id: str
    secret_sha256: str
    created_at: float
    expires_at: float
    used_by: str | None = None
    used_at: float | None = None


@dataclass
class SeedRecord:
    """The seed a donated node accepted (no secret: a public key and its signature)."""

    donation_id: str
    party_id: str
    owner_key: str  # hex of the 32-byte public key that signed
    signature: str  # hex
    seeded_at: float


@dataclass
class NodeState:
    node_id: str
    membership: Membership | None = None
    owner_token_sha256: list[str] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)
    invitations: list[Invitation] = field(default_factory=list)
    #: Only on a donated node once seeded. Optional in the file: older ones have none.
    seed: SeedRecord | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"version": STATE_VERSION}
        doc.update(asdict(self))
        if doc["seed"] is None:
            del doc["seed"]  # a hosted node's file stays as it always was
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> NodeState:
        """Parse a document; raises ``ValueError``/``TypeError``/``KeyError`` if bad."""
        if not isinstance(doc, dict):
            raise TypeError("not a JSON object")
        version = doc.get("version")
        if version != STATE_VERSION:
            raise ValueError(f"unknown version {version!r}")
        membership = doc.get("membership")
        seed = doc.get("seed")
        state = cls(
            node_id=_str(doc["node_id"]),
            membership=None if membership is None else _membership(membership),
            owner_token_sha256=[_str(h) for h in _list(doc["owner_token_sha256"])],
            members=[_member(m) for m in _list(doc["members"])],
            invitations=[_invitation(i) for i in _list(doc["invitations"])],
            seed=None if seed is None else _seed(seed),
        )
        return state


class StateStore:
    """Holds the current :class:`NodeState` and its file. Synchronous on purpose.

    Every change is read-modify-write with no ``await`` in between, so on one event
    loop two requests can never interleave a change.
    """

    def __init__(self, node_dir: Path, node_id: str) -> None:
        self.path = node_dir / STATE_FILE
        self._state = self._load(node_id)

    @property
    def state(self) -> NodeState:
        """The current state. Treat it as read-only; change it with :meth:`update`."""
        return self._state

    def update(self, change: Callable[[NodeState], T]) -> T:
        """Apply ``change`` to a copy, persist it, then make it current.

        Returns what ``change`` returned. Raises :class:`StorageError` (state
        unchanged) if the file cannot be written, and lets an exception from
        ``change`` itself through with the state unchanged.
        """
        draft = copy.deepcopy(self._state)
        result = change(draft)
        data = json.dumps(draft.to_json(), indent=2, sort_keys=True).encode() + b"\n"
        try:
            write_bytes_atomic(self.path, data)
        except OSError as err:
            raise StorageError(f"cannot save the node state: {err.strerror}") from None
        self._state = draft
        return result

    def _load(self, node_id: str) -> NodeState:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return NodeState(node_id=node_id)
        except OSError as err:
            raise NodeDirError(f"cannot read {self.path}: {err.strerror}") from None
        try:
            return NodeState.from_json(json.loads(raw))
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as err:
            raise CorruptFileError(
                f"state file {self.path} is unreadable ({_describe(err)}); it was left "
                "as is. Restore it from a backup, or move it away to make this node "
                "unclaimed again."
            ) from None


def _describe(err: Exception) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"not JSON: {err.msg} at line {err.lineno}"
    if isinstance(err, KeyError):
        return f"missing field {err.args[0]!r}"
    return str(err) or type(err).__name__


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _opt_num(value: Any) -> float | None:
    return None if value is None else _num(value)


_OPTIONAL = (_opt_str, _opt_num)


def _record(cls: type[T], value: Any, **fields: Callable[[Any], Any]) -> T:
    """A `cls` from a JSON object, each field checked by its reader. A field whose reader
    is an `_opt_` one may be missing; any other must be there (the KeyError names it)."""
    d = _dict(value)
    return cls(**{name: read(d.get(name) if read in _OPTIONAL else d[name]) for name, read in fields.items()})


def _membership(value: Any) -> Membership:
    return _record(Membership, value, cadre=_str, via=_str, joined_at=_num, inviter=_opt_str)


def _member(value: Any) -> Member:
    return _record(Member, value, peer_id=_str, joined_at=_num, via=_str)


def _invitation(value: Any) -> Invitation:
    return _record(Invitation, value, id=_str, secret_sha256=_str, created_at=_num, expires_at=_num,
                   used_by=_opt_str, used_at=_opt_num)


def _seed(value: Any) -> SeedRecord:
    return _record(SeedRecord, value, donation_id=_str, party_id=_str, owner_key=_str, signature=_str,
                   seeded_at=_num)
