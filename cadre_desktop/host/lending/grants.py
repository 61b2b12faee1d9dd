"""Grants: the owner's permission for another cadre to borrow nodes of this host.

A grant is a row in `grants.json` (0600, versioned, like every file the host
keeps) and a token in the keyring (`<grant id>/grant-token`). The owner hands
the borrower a *grant link*, `http://<advertise_host>:<lend_port>/grants/<id>#<token>`
(the token in the fragment, like a claim URL: it never reaches a server log);
the borrower's software sends the token back as `Authorization: Bearer`.

The row keeps the token's SHA-256, never the token: the lend API checks a
token without a keyring round trip (which may block on an unlock prompt), and
can still answer "revoked" to the right token once the keyring entry is gone.
A 256-bit random token cannot be found from its digest.

A grant is *active* until it is revoked or its expiry passes. Either way its
loans end and its keyring entry is deleted (`closed_at` says that is done; a
host killed half-way finishes at the next pass). Rows stay, as history. A
closed grant never opens again: once `closed_at` is written it is expired (or
revoked) whatever the wall clock says later, and the service judges expiry on
a clock that does not step back (`LendingService.now`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets as _random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import TypedDict, Unpack

from cadre_desktop.errors import Invalid
from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.host.core.ops.validate import clean_name
from cadre_desktop.host.core.records.records import optional_str
from cadre_desktop.host.core.records.rowstore import RowStore
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.text import url_host

FILE_VERSION = 1
GRANT_ID = re.compile(r"gr_[a-z0-9]{12}")
DEFAULT_MAX_NODES = 2
#: A grant may be made for at most a year; an expiry is at least a minute away.
MIN_EXPIRY_S, MAX_EXPIRY_S = 60, 366 * 24 * 3600


class GrantState(str, Enum):
    #: Written, but its token is not known to be in the keyring yet (a crash leaves this).
    CREATING = "creating"
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


class GrantChanges(TypedDict, total=False):
    """What `Grant.replace` may change: any of its fields, each of its own type."""

    label: str
    max_nodes: int
    token_sha256: str
    created_at: str
    updated_at: str
    expires_at: str | None
    revoked_at: str | None
    creating: bool
    closed_at: str | None
    extra: JSONObject


@dataclass(frozen=True)
class Grant:
    id: str
    label: str
    max_nodes: int
    token_sha256: str
    created_at: str
    updated_at: str = ""
    expires_at: str | None = None
    revoked_at: str | None = None
    creating: bool = False
    #: Its loans are ended and its keyring entry deleted (after a revoke or the expiry).
    closed_at: str | None = None
    extra: JSONObject = field(default_factory=dict)

    def replace(self, **changes: Unpack[GrantChanges]) -> Grant:
        return dataclasses.replace(self, **changes)

    def state(self, now: datetime) -> GrantState:
        if self.creating:
            return GrantState.CREATING
        if self.revoked_at:
            return GrantState.REVOKED
        if self.closed_at:
            return GrantState.EXPIRED  # closed, and not revoked: it expired; a clock stepped back never reopens it
        expires = parse_iso(self.expires_at)
        if self.expires_at and (expires is None or expires <= now):
            return GrantState.EXPIRED  # an unreadable expiry is taken as passed: refusing is safe
        return GrantState.ACTIVE

    def to_row(self) -> JSONObject:
        row: JSONObject = {
            "label": self.label,
            "max_nodes": self.max_nodes,
            "token_sha256": self.token_sha256,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
            "closed_at": self.closed_at,
        }
        if self.creating:
            row["creating"] = True
        row.update(self.extra)
        return row


_KNOWN = {"label", "max_nodes", "token_sha256", "created_at", "updated_at", "expires_at", "revoked_at",
          "closed_at", "creating"}


def is_grant_id(value: object) -> bool:
    return isinstance(value, str) and GRANT_ID.fullmatch(value) is not None


def grant_from_row(grant_id: str, row: object) -> Grant:
    """Build a grant from its JSON row; a row of the wrong shape raises ValueError."""
    if not is_grant_id(grant_id):
        raise ValueError(f"the grant id {grant_id[:80]!r} is not a valid grant id")
    if not isinstance(row, dict):
        raise ValueError(f"grant {grant_id!r} is not an object")
    label, max_nodes, digest = row.get("label"), row.get("max_nodes"), row.get("token_sha256")
    if not isinstance(label, str):
        raise ValueError(f"grant {grant_id!r} has no label")
    if not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or max_nodes < 1:
        raise ValueError(f"grant {grant_id!r}: max_nodes must be a whole number of at least 1")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError(f"grant {grant_id!r}: token_sha256 must be 64 hex digits")
    for key in ("expires_at", "revoked_at", "closed_at"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise ValueError(f"grant {grant_id!r}: {key} must be a time or null")
    if not isinstance(row.get("creating", False), bool):
        raise ValueError(f"grant {grant_id!r}: creating must be true or false")
    return Grant(
        id=grant_id,
        label=label,
        max_nodes=max_nodes,
        token_sha256=digest,
        created_at=str(row.get("created_at") or ""),
        updated_at=str(row.get("updated_at") or ""),
        expires_at=optional_str(row, "expires_at"),
        revoked_at=optional_str(row, "revoked_at"),
        closed_at=optional_str(row, "closed_at"),
        creating=bool(row.get("creating", False)),
        extra={k: v for k, v in row.items() if k not in _KNOWN},
    )


class GrantStore(RowStore[Grant]):
    def __init__(self, path: Path) -> None:
        super().__init__(path, what="grants", key="grants", parse=grant_from_row, is_id=is_grant_id,
                         version=FILE_VERSION, upgrades={})


# -- tokens and links ------------------------------------------------------------------

def new_grant_id() -> str:
    return "gr_" + "".join(_random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))


def new_token() -> str:
    """256 random bits, URL-safe: a grant token (it travels in a link's fragment and a QR code), a seed token."""
    return _random.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def grant_link(advertise_host: str, lend_port: int, grant_id: str, token: str) -> str:
    return f"http://{url_host(advertise_host)}:{lend_port}/grants/{grant_id}#{token}"


# -- what a person may ask for ---------------------------------------------------------------

def clean_label(label: object, fallback: str) -> str:
    return clean_name(label, fallback, "grant's label") or fallback


def check_max_nodes(value: object, host_cap: int) -> int:
    if value is None:
        return min(DEFAULT_MAX_NODES, host_cap)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= host_cap:
        raise Invalid(
            f"'max_nodes' must be a whole number from 1 to {host_cap} (the host-wide cap, "
            "setting 'lend_max_nodes')."
        )
    return value


def expiry_after(now: datetime, expires_in_s: object) -> datetime | None:
    if expires_in_s is None:
        return None
    if (not isinstance(expires_in_s, int) or isinstance(expires_in_s, bool)
            or not MIN_EXPIRY_S <= expires_in_s <= MAX_EXPIRY_S):
        raise Invalid(
            f"'expires_in_s' must be a whole number of seconds from {MIN_EXPIRY_S} to {MAX_EXPIRY_S} "
            "(a year), or null for a grant that does not expire."
        )
    return now + timedelta(seconds=expires_in_s)
