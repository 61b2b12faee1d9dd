"""A node's `run.json` (docs/node-contract.md §7), the one definition both sides use: what a
node asks of its host as it exits with code 0.

`{"state": "paused" | "sleeping" | "done", "wake_at": "<RFC 3339>" | null, "reason": "<one line>"}`
in the node's work folder. The node writes it (`checked`: a request out of the contract is
refused whole); the host removes any old one before each start and reads it only after an exit
with code 0 (`parse`: the node wrote it, so it is hostile until checked; a field the host does
not need is ignored, anything else out of the contract raises `BadRunFile`). Either way the
reason is made one printable line of at most `REASON_MAX` characters, and a `wake_at` is read
only while at most `WAKE_AT_MAX` characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from cadre_desktop.errors import Invalid, NodeFault
from cadre_desktop.jsontypes import loads
from cadre_desktop.text import one_line
from cadre_desktop.times import parse_time

NAME = "run.json"
STATES = ("paused", "sleeping", "done")
FIELDS = ("state", "wake_at", "reason")
MAX_BYTES = 4096
REASON_MAX = 200
WAKE_AT_MAX = 64


class RunDoc(TypedDict):
    """A run.json document as the node writes it (and its API answers it), in this key order."""

    state: str
    wake_at: str | None
    reason: str


@dataclass(frozen=True)
class RunRequest:
    """What a node asked for, as the host takes it: a hold state, when to wake (sleeping only), and why."""

    state: str
    wake_at: datetime | None
    reason: str


class BadRunFile(NodeFault):
    """A run.json that is not what the node contract says (the node's fault)."""

    code = "bad_run_file"


def wake_time(value: object, *, zone_required: bool) -> datetime | None:
    """A `wake_at` as a time, or None when it is not a bounded RFC 3339 string. A time without
    its zone is None when `zone_required` (what a node writes), else taken as UTC (what the host reads).
    A time outside the calendar's window (`times.parse_time`) is None either way."""
    return parse_time(value, zone="required" if zone_required else "utc")


def checked(body: Mapping[str, object]) -> RunDoc:
    """The run.json a node is asked to write (`POST /host/run`), strictly: a field out of the
    contract raises Invalid (the API's 400), and nothing of it is written."""
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}")
    state = body.get("state")
    if not isinstance(state, str) or state not in STATES:
        raise Invalid(f"state must be one of {', '.join(STATES)}")
    wake_at = body.get("wake_at")
    if wake_at is not None:
        if state != "sleeping":
            raise Invalid("wake_at is for state sleeping only")
        if not isinstance(wake_at, str) or wake_time(wake_at, zone_required=True) is None:
            raise Invalid("wake_at must be an RFC 3339 time with its zone")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise Invalid(f"reason must be a string of at most {REASON_MAX} characters")
    return {"state": state, "wake_at": wake_at, "reason": one_line(reason, REASON_MAX)}


def parse(raw: bytes) -> RunRequest:
    """A run.json's bytes as the host takes them (at most `MAX_BYTES`, read by the caller);
    anything but the contract's shape raises BadRunFile. A wake time is kept for sleeping only."""
    try:
        doc: object = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadRunFile("it is not JSON") from None
    if not isinstance(doc, dict):
        raise BadRunFile("it is not a JSON object")
    state = doc.get("state")
    if not isinstance(state, str) or state not in STATES:
        raise BadRunFile(f"its state must be one of {', '.join(STATES)}")
    wake_raw = doc.get("wake_at")
    wake_at = None
    if wake_raw is not None:
        wake_at = wake_time(wake_raw, zone_required=False)
        if wake_at is None:
            raise BadRunFile("its wake_at is not an RFC 3339 time")
    reason = doc.get("reason", "")
    if reason is not None and not isinstance(reason, str):
        raise BadRunFile("its reason is not a string")
    return RunRequest(state=state, wake_at=wake_at if state == "sleeping" else None,
                      reason=one_line(reason or "", REASON_MAX))
