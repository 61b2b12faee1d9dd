"""Starting a lent node again from its row alone, and Retry after a give-up.

A respawn reads the seed token (the keyring, or this process's memory), then
re-reads the row: a loan that ended, or a node given up on, while the token was
read is *abandoned*: nothing is started and nothing counted. From that re-read
to the write of the new handle nothing awaits, so the row written back is the
row just read. A start that fails still spends an attempt (written with the
error before the exception leaves), like a hosted node's.
"""

from __future__ import annotations

import logging

from cadre_desktop.errors import CadreError, Conflict, SecretsError
from cadre_desktop.host.clock import iso
from cadre_desktop.host.donations import DONATION_SUPERVISED, Donation, DonationStatus
from cadre_desktop.host.events import EventKind
from cadre_desktop.host.records import RespawnInfo
from cadre_desktop.host.secrets import SecretKind

log = logging.getLogger(__name__)


async def start_node(service, donation_id: str, *, count_attempt: bool = True) -> Donation | None:
    """Start the lent node's child again; the new row, or None when abandoned."""
    current = service.donations.get(donation_id)
    if current is None or current.status not in DONATION_SUPERVISED:
        return None
    if not current.respawnable:
        raise CadreError(f"Lent node {donation_id} has no record of how it was first started, so it "
                         "cannot be started again; end its loan.", code="not_respawnable")
    try:
        token = await service.token(donation_id, SecretKind.SEED_TOKEN)
        if token is None:
            raise SecretsError(f"The seed token of lent node {donation_id} is missing from the keyring; "
                               "end its loan.")
    except CadreError as exc:
        note_error(service, donation_id, exc.message, count_attempt)
        raise
    current = service.donations.get(donation_id)
    if current is None or current.status not in DONATION_SUPERVISED:
        return None
    want = (current.api_port, current.p2p_port) if current.api_port and current.p2p_port else None
    attempted_at = iso(service.now())  # no await from the re-read above to the write below
    try:
        handle = service.orchestrator.spawn(donation_id, current.node_env(token), want_ports=want,
                                            avoid_ports=service.ports_in_use(donation_id))
    except Exception as exc:
        message = exc.message if isinstance(exc, CadreError) else f"the node could not be started: {exc}"
        note_error(service, donation_id, message, count_attempt)
        raise
    started = current.replace(
        handle=handle.id, api_port=handle.api_port, p2p_port=handle.p2p_port,
        respawn=RespawnInfo(current.attempts + 1, attempted_at) if count_attempt else current.respawn,
        updated_at=iso(service.now()),
    )
    service.donations.put(started)
    service.events.emit(EventKind.DONATION_CHANGED, donation_id)
    return started


def note_error(service, donation_id: str, message: str, count_attempt: bool) -> None:
    """Write the error (and the failed attempt, if it counts) on the current row."""
    current = service.donations.get(donation_id)
    if current is None or current.status not in DONATION_SUPERVISED:
        return
    changed = current.replace(error=message, updated_at=iso(service.now()))
    if count_attempt:
        changed = changed.replace(respawn=RespawnInfo(current.attempts + 1, iso(service.now())))
    try:
        service.donations.put(changed)
    except CadreError as exc:
        log.error("could not record the error of lent node %s: %s", donation_id, exc.message)
    service.events.emit(EventKind.DONATION_CHANGED, donation_id)


async def retry(service, donation_id: str) -> Donation:
    """Bring a lent node back from `error` with a fresh budget, and start it now (on the queue)."""
    async def work() -> Donation:
        donation = service.require_donation(donation_id)
        if donation.status is not DonationStatus.ERROR:
            raise Conflict(f"Lent node {donation_id} is {donation.status.value}; only one in error "
                           "can be retried.")
        await service.orchestrator.stop_node(donation_id)  # a child left from the give-up goes first
        donation = service.require_donation(donation_id)
        if donation.status is not DonationStatus.ERROR:
            raise Conflict(f"Lent node {donation_id} changed while it was being retried.")
        seeded = bool(donation.seeded_at)
        service.move(donation, DonationStatus.SEEDED if seeded else DonationStatus.AWAITING_SEED,
                     "retry requested", error=None, respawn=None,
                     awaiting_since=donation.awaiting_since if seeded else iso(service.now()))
        await start_node(service, donation_id)
        return service.require_donation(donation_id)
    return await service.serialize(work)
