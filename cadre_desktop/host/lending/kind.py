"""A lent node as a kind of supervised record: its statuses, table, secret and events.

The lifecycle, the supervisor, the decision and the probe are the hosted
nodes' own (host/core/records/lifecycle.py); this says only what differs for a node lent to
another cadre:

* `awaiting_seed` and `seeded` are kept running (same backoff, budget, refill,
  give-up and start grace, from the `donation_*` settings where set);
  `provisioning` belongs to the code creating it and the reaper;
* a start needs the seed token (`<id>/seed-token`) and every input of the first
  start, from the row; a row without them is skipped, and said so;
* the node's own answer moves it: `awaiting_seed` (with its peer id) and
  `seeded`;
* events are the lending ones (`donation_*`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from enum import Enum
from typing import Any

from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.events import EventBus, EventKind
from cadre_desktop.host.core.records.lifecycle import AnyLife, Change, RecordKind, StatusTaker
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.host.lending.donations import DONATION_HELD, DONATION_SUPERVISED, Donation, DonationStatus
from cadre_desktop.settings import Settings
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

D = DonationStatus
_SUP = DONATION_SUPERVISED
_HELD = DONATION_HELD
_ANY = frozenset(DonationStatus)
_NONE: frozenset[DonationStatus] = frozenset()

#: change -> (statuses it may start from, statuses it may end in), for lent nodes.
DONATION_TRANSITIONS: dict[Change, tuple[frozenset[DonationStatus], frozenset[DonationStatus]]] = {
    Change.CREATE: (_NONE, frozenset({D.PROVISIONING})),
    Change.SPAWNED: (frozenset({D.PROVISIONING}), frozenset({D.PROVISIONING})),
    Change.AWAITING_SEED: (frozenset({D.PROVISIONING, D.SEEDED}), frozenset({D.AWAITING_SEED})),
    Change.SEEDED: (frozenset({D.PROVISIONING, D.AWAITING_SEED, D.SEEDED}), frozenset({D.SEEDED})),
    Change.STARTED: (_SUP, _SUP),
    Change.START_FAILED: (_SUP, _SUP),
    Change.ADOPT: (_SUP, _SUP),
    Change.ANSWERED: (_SUP | {D.PROVISIONING}, _SUP | {D.PROVISIONING}),
    Change.REFILL: (_SUP, _SUP),
    Change.PEER: (_SUP | {D.PROVISIONING}, _SUP | {D.PROVISIONING}),
    Change.GIVE_UP: (_SUP, frozenset({D.ERROR})),
    Change.RETRY: (frozenset({D.ERROR, D.DONE}), _SUP),
    Change.EXITED: (_ANY, _ANY),
    Change.WAITING: (_SUP, _SUP),
    # Hosted nodes' news; a lent node never has it.
    Change.JOINED: (_NONE, _NONE),
    Change.INVITATION_FAILED: (_NONE, _NONE),
    # A lent node runs under the host's caps; it has none of its own.
    Change.CAPS: (_NONE, _NONE),
    # Holds, as a hosted node's: its owner pauses it, or it holds itself (its run.json).
    Change.PAUSE: (_SUP | _HELD, frozenset({D.PAUSED, D.SLEEPING})),
    Change.HOLD: (_SUP, _HELD),
    Change.WAKE: (frozenset({D.SLEEPING}), _SUP),
    Change.RESUME: (_HELD, _SUP),
}


def _announce(events: EventBus, change: Change, before: Donation, after: Donation, detail: str) -> None:
    if change is Change.SPAWNED:
        events.emit(EventKind.DONATION_ADDED, after.id)
        return
    events.emit(EventKind.DONATION_CHANGED, after.id, detail if change is Change.EXITED else "")
    if change is Change.GIVE_UP:
        events.emit(EventKind.DONATION_GAVE_UP, after.id, detail or (after.error or ""))


def _retry(donation: Donation, now: str) -> dict[str, Any]:
    if donation.seeded_at:
        return {"status": D.SEEDED}
    # Its unseeded time starts again, or the reaper would end it at once.
    return {"status": D.AWAITING_SEED, "awaiting_since": now}


def _cannot_start(donation: Donation) -> str | None:
    if donation.respawnable:
        return None
    return "its row does not hold every input of its first start (an older build wrote it); end its loan"


def _text(value: object, limit: int) -> str | None:
    return one_line(value, limit) or None if isinstance(value, str) else None


def take_status(lc: AnyLife, donation_id: str, handle_id: str, status: dict[str, Any]) -> None:
    """What a lent node says of itself, about this very child only (each write in the turn of its read)."""
    record = lc.get(donation_id)
    if not isinstance(record, Donation) or record.handle != handle_id or record.status is D.ERROR:
        return
    if status.get("donation_id") != donation_id:
        log.warning("lent node %s answers as another node (%r); its answer is not taken",
                    donation_id, _text(status.get("donation_id"), 80))
        return
    state = status.get("state")
    peer_id = _text(status.get("peer_id"), 128) or record.peer_id
    now = lc.clock.now()
    if state == "seeded" and record.status is not D.SEEDED:
        lc.apply(donation_id, Change.SEEDED, lambda r: r.replace(
            status=D.SEEDED, peer_id=peer_id, seeded_at=record.seeded_at or iso(now)), handle=handle_id)
    elif state == "awaiting_seed" and record.status is not D.AWAITING_SEED:
        if record.status is D.SEEDED:
            log.warning("lent node %s says it is not seeded any more; its party must seed it again", donation_id)
        lc.apply(donation_id, Change.AWAITING_SEED, lambda r: r.replace(
            status=D.AWAITING_SEED, peer_id=peer_id, awaiting_since=iso(now)), handle=handle_id)
    elif peer_id != record.peer_id:
        lc.apply(donation_id, Change.PEER, lambda r: r.replace(peer_id=peer_id), handle=handle_id)


_HOLDS: dict[str, Enum] = {"paused": D.PAUSED, "sleeping": D.SLEEPING, "done": D.DONE}


class DonatedKind:
    """A node this host runs for another cadre's party, under a grant."""

    noun = "lent node"
    transitions: Mapping[Change, tuple[frozenset[Enum], frozenset[Enum]]] = DONATION_TRANSITIONS
    supervised: frozenset[Enum] = DONATION_SUPERVISED
    probed: frozenset[Enum] = DONATION_SUPERVISED | {D.PROVISIONING}
    creating: Enum = D.PROVISIONING
    error: Enum = D.ERROR
    removed_event = EventKind.DONATION_REMOVED
    on_status: StatusTaker | None = staticmethod(take_status)
    holds: Mapping[str, Enum] = _HOLDS
    held: frozenset[Enum] = frozenset(_HOLDS.values())

    def announce(self, events: EventBus, change: Change, before: Any, after: Any, detail: str) -> None:
        _announce(events, change, before, after, detail)

    def secret_kind(self, record: Any) -> SecretKind:
        return SecretKind.SEED_TOKEN

    def secret_env(self, record: Any, secret: str, host_token: str | None = None) -> dict[str, str]:
        # No host token: the owner's host has no say in a party's node beyond its life.
        env: dict[str, str] = record.node_env(secret)
        return env

    def retry(self, record: Any, now: str) -> dict[str, Any]:
        return _retry(record, now)

    def label(self, record: Any) -> str:
        return f"{record.id} (party {record.party_id})"

    def cannot_start(self, record: Any) -> str | None:
        return _cannot_start(record)

    def settings(self, settings: Settings) -> Settings:
        return settings.donation_supervision()


DONATED: RecordKind = DonatedKind()
