"""Donations: the host's rows for the nodes it lends (`donations.json`).

A donation is one node this host runs for another party under a grant. Its id
(`grn_<random>`) is also the node's id: its work folder is `nodes/<id>/` and
its seed token is the keyring entry `<id>/seed-token`.

Statuses::

    provisioning --the node answers /status--> awaiting_seed --POST /seed--> seeded
    any of them --the host gives up--> error         (Retry brings it back)

The row carries every input of the node's first start (party, profile,
bootstrap nodes, owner keys; the seed token is in the keyring), so a crashed
node is started again from the row alone. A row written without them (an older
build's) is kept and shown, but is *not respawnable*: supervision skips it and
says so, and never stops a pass over it.
"""

from __future__ import annotations

import re
import secrets as _random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from cadre_desktop.errors import Invalid, MachineError
from cadre_desktop.host.core.records.records import LIFE_KEYS, SupervisedRow, life_from_row, optional_str
from cadre_desktop.host.core.records.rowstore import RowStore
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.wire.seed import (
    DEFAULT_PROFILE,
    MAX_BOOTSTRAP_NODES,
    MAX_OWNER_KEYS,
    PROFILE_WORDS,
    PROFILES,
    SeedError,
    check_bootstrap_address,
    is_id,
    parse_key,
)

FILE_VERSION = 1
DONATION_ID = re.compile(r"grn_[a-z0-9]{12}")


class DonationStatus(str, Enum):
    #: Spawned (or being spawned); the node has not answered yet. The code creating it owns it.
    PROVISIONING = "provisioning"
    AWAITING_SEED = "awaiting_seed"
    SEEDED = "seeded"
    #: Given up on; only an explicit Retry brings it back.
    ERROR = "error"
    #: Held by its host (its owner paused it) or by itself (its run.json), as a hosted node is.
    PAUSED = "paused"
    SLEEPING = "sleeping"
    DONE = "done"


#: What the supervisor keeps running.
DONATION_SUPERVISED = frozenset({DonationStatus.AWAITING_SEED, DonationStatus.SEEDED})
#: Kept down on purpose: nothing starts it, no attempt is spent.
DONATION_HELD = frozenset({DonationStatus.PAUSED, DonationStatus.SLEEPING, DonationStatus.DONE})


class FieldError(Invalid):
    """A field of a lend API request is missing or wrong; the message names it."""

    code = "invalid_field"


@dataclass(frozen=True)
class DonationRequest:
    """What a borrower asks for, checked."""

    party_id: str
    profile: str
    bootstrap_nodes: tuple[str, ...]
    owner_keys: tuple[str, ...]


@dataclass(frozen=True)
class Donation(SupervisedRow):
    id: str
    grant_id: str
    party_id: str
    profile: str
    status: DonationStatus
    #: None on a row an older build wrote: such a row is not respawnable.
    bootstrap_nodes: tuple[str, ...] | None = None
    owner_keys: tuple[str, ...] | None = None
    #: When it reached `awaiting_seed` (the unseeded reaper's clock) and `seeded`.
    awaiting_since: str | None = None
    seeded_at: str | None = None

    @property
    def respawnable(self) -> bool:
        """Every input of the first start is on the row."""
        return bool(self.party_id and self.profile and self.bootstrap_nodes is not None and self.owner_keys)

    def node_env(self, seed_token: str) -> dict[str, str]:
        """The donated-mode variables of the node contract (with its secret: never log it)."""
        if not self.respawnable:
            raise MachineError(f"Donation {self.id} does not have what its node needs to start.",
                               code="not_respawnable")
        return {
            "CADRE_DONATION_ID": self.id,
            "CADRE_PARTY_ID": self.party_id,
            "CADRE_OWNER_KEYS": ",".join(self.owner_keys or ()),
            "CADRE_BOOTSTRAP_NODES": ",".join(self.bootstrap_nodes or ()),
            "CADRE_PROFILE": self.profile,
            "CADRE_SEED_TOKEN": seed_token,
        }

    def to_row(self) -> JSONObject:
        row: JSONObject = {
            "grant_id": self.grant_id,
            "party_id": self.party_id,
            "profile": self.profile,
            "status": self.status.value,
            "awaiting_since": self.awaiting_since,
            "seeded_at": self.seeded_at,
            **self.life_row(),
        }
        if self.bootstrap_nodes is not None:
            row["bootstrap_nodes"] = list(self.bootstrap_nodes)
        if self.owner_keys is not None:
            row["owner_keys"] = list(self.owner_keys)
        row.update(self.extra)
        return row


_OWN_STR = ("awaiting_since", "seeded_at")
_KNOWN = {"grant_id", "party_id", "profile", "status", "bootstrap_nodes", "owner_keys", *_OWN_STR, *LIFE_KEYS}


def is_donation_id(value: object) -> bool:
    return isinstance(value, str) and DONATION_ID.fullmatch(value) is not None


def new_donation_id() -> str:
    return "grn_" + "".join(_random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))


def _string_list(donation_id: str, row: Mapping[str, object], key: str) -> tuple[str, ...] | None:
    value = row.get(key)
    if value is None:
        return None
    items = value if isinstance(value, list) else None
    strings = tuple(v for v in items or () if isinstance(v, str))
    if items is None or len(strings) != len(items):
        raise ValueError(f"donation {donation_id!r}: {key} must be a list of strings")
    return strings


def donation_from_row(donation_id: str, row: object) -> Donation:
    """Build a donation from its JSON row; a row of the wrong shape raises ValueError."""
    if not is_donation_id(donation_id):
        raise ValueError(f"the donation id {donation_id[:80]!r} is not a valid donation id")
    if not isinstance(row, dict):
        raise ValueError(f"donation {donation_id!r} is not an object")
    for key in ("grant_id", "party_id", "profile"):
        if not isinstance(row.get(key), str):
            raise ValueError(f"donation {donation_id!r} has no {key}")
    try:
        status = DonationStatus(row.get("status"))
    except ValueError:
        raise ValueError(f"donation {donation_id!r} has an unknown status {row.get('status')!r}") from None
    return Donation(
        id=donation_id,
        grant_id=row["grant_id"],
        party_id=row["party_id"],
        profile=row["profile"],
        status=status,
        bootstrap_nodes=_string_list(donation_id, row, "bootstrap_nodes"),
        owner_keys=_string_list(donation_id, row, "owner_keys"),
        awaiting_since=optional_str(row, "awaiting_since"),
        seeded_at=optional_str(row, "seeded_at"),
        **life_from_row(f"donation {donation_id!r}", donation_id, row, _OWN_STR),
        extra={k: v for k, v in row.items() if k not in _KNOWN},
    )


class DonationStore(RowStore[Donation]):
    def __init__(self, path: Path) -> None:
        super().__init__(path, what="donations", key="donations", parse=donation_from_row,
                         is_id=is_donation_id, version=FILE_VERSION, upgrades={})

    def of_grant(self, grant_id: str) -> list[Donation]:
        return [d for d in self.list() if d.grant_id == grant_id]


# -- a borrower's request, checked field by field ------------------------------------------

REQUEST_FIELDS = {"party_id", "profile", "bootstrap_nodes", "owner_keys"}


def check_request(body: Mapping[str, object]) -> DonationRequest:
    """Every field bounded and named in its error; unknown fields are refused."""
    unknown = sorted(set(body) - REQUEST_FIELDS)
    if unknown:
        shown = ", ".join(repr(k[:32]) for k in unknown[:4])
        raise FieldError(f"unknown field(s): {shown}; the fields are {', '.join(sorted(REQUEST_FIELDS))}")
    party_id = body.get("party_id")
    if not is_id(party_id):
        raise FieldError("'party_id' must be 1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit")
    profile = body.get("profile", DEFAULT_PROFILE)
    if not isinstance(profile, str) or profile not in PROFILES:
        raise FieldError(f"'profile' must be {PROFILE_WORDS}")
    nodes = body.get("bootstrap_nodes", [])
    if not isinstance(nodes, list) or len(nodes) > MAX_BOOTSTRAP_NODES:
        raise FieldError(f"'bootstrap_nodes' must be a list of at most {MAX_BOOTSTRAP_NODES} addresses")
    _each("bootstrap_nodes", nodes, check_bootstrap_address)
    keys = body.get("owner_keys")
    if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_OWNER_KEYS:
        raise FieldError(f"'owner_keys' must be a list of 1 to {MAX_OWNER_KEYS} base64url Ed25519 public keys")
    _each("owner_keys", keys, parse_key)
    return DonationRequest(
        party_id=party_id,
        profile=profile,
        bootstrap_nodes=tuple(dict.fromkeys(nodes)),
        owner_keys=tuple(dict.fromkeys(k.rstrip("=") for k in keys)),
    )


def _each(field: str, items: Sequence[object], check: Callable[[object], object]) -> None:
    for index, item in enumerate(items):
        try:
            check(item)
        except SeedError as exc:
            raise FieldError(f"'{field}'[{index}]: {exc}") from None
