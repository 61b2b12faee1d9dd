"""The lending reaper: finish what a crash left half-done, clear what waited too long.

One pass, run at start-up (after the orchestrator re-attached) and at every
sweep:

  grant left `creating` (host died mid-create)      -> row and keyring entry cleared
  grant revoked or expired, not yet closed          -> its loans end, its token is deleted
  donation whose grant is no longer active          -> loan ends
  donation `provisioning` without a handle          -> loan ends (the host died before the spawn
                                                       was written; the folder is reclaimed)
  donation `provisioning` past its TTL (2 min)      -> loan ends: the node never answered
  donation `awaiting_seed` past its TTL (24 h)      -> loan ends: nobody seeded it
  end of a loan left unfinished (a tombstone)       -> child, folder and seed token removed

Work in flight in this run (a create, an end) is left alone. A pass never
raises: one failing step is logged and tried again at the next. While the
keyring refuses, the pass waits for it (see `reap`).

It works on `Loans`: what it reads and asks of the lending service, no more
(`LendingService` is one; the reaper does not import it).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Protocol

from cadre_desktop.errors import message_of
from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.host.lending.donations import Donation, DonationStatus, DonationStore
from cadre_desktop.host.lending.grants import Grant, GrantState, GrantStore
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)


class Loans(Protocol):
    """What a pass reads and asks of lending (host/lending/service.py's `LendingService`)."""

    grants: GrantStore
    donations: DonationStore
    gate: KeyringGate
    #: Its numbers now: the provisioning and unseeded TTLs.
    settings: Settings

    @property
    def in_flight(self) -> set[str]: ...

    def now(self) -> datetime: ...

    def active_grants(self) -> list[Grant]: ...

    async def forget_token(self, row_id: str, kind: SecretKind) -> None: ...

    async def close_grant(self, grant_id: str) -> None: ...

    async def grants_changed(self) -> None: ...

    async def end(self, donation_id: str, why: str = ...) -> bool: ...

    async def clean_up(self, donation_id: str) -> None: ...


def _older(stamp: str | None, now: datetime, age: timedelta) -> bool:
    when = parse_iso(stamp)
    return when is None or now - when > age  # an unreadable time is old: clearing is safe


async def reap(service: Loans) -> list[str]:
    """One pass over grants and donations; the ids it finished or cleared."""
    reaped: list[str] = []
    if service.gate.condition is not None:
        # Every step ends with a keyring call, and the keyring refuses now: asking it again
        # each sweep could pop up an unlock prompt a minute. Nothing waits on this meanwhile
        # (an ended grant is refused by the lend API all the same); the first sweep after the
        # keyring works again catches up.
        return reaped
    for step in (_reap_grants, _reap_donations, _finish_removals):
        try:
            reaped += await step(service)
        except Exception as exc:  # one failed step must not stop the others; the next pass retries it
            message = message_of(exc)
            log.error("lending clean-up failed (retried at the next pass): %s", message)
    return reaped


async def _reap_grants(service: Loans) -> list[str]:
    done = []
    now = service.now()
    for grant in service.grants.list():
        if grant.id in service.in_flight:
            continue
        if grant.creating:
            log.warning("grant %s was left half-created by an earlier run; clearing it", grant.id)
            await service.forget_token(grant.id, SecretKind.GRANT_TOKEN)
            service.grants.remove(grant.id)
            done.append(grant.id)
        elif grant.state(now) is not GrantState.ACTIVE and not grant.closed_at:
            log.info("grant %s is %s; ending its loans", grant.id, grant.state(now).value)
            await service.close_grant(grant.id)
            done.append(grant.id)
    if done:
        await service.grants_changed()
    return done


def _why_clear(service: Loans, donation: Donation, open_grants: set[str], now: datetime) -> str | None:
    settings = service.settings
    provisioning_ttl = timedelta(milliseconds=settings.donation_provisioning_ttl_ms)
    unseeded_ttl = timedelta(milliseconds=settings.donation_awaiting_seed_ttl_ms)
    if donation.grant_id not in open_grants:
        return "its grant is no longer active"
    if donation.status is DonationStatus.PROVISIONING and not donation.handle:
        return "it was left half-created by an earlier run"
    if donation.status is DonationStatus.PROVISIONING and _older(donation.created_at, now, provisioning_ttl):
        return f"its node did not answer within {provisioning_ttl.total_seconds():.0f} s"
    if donation.status is DonationStatus.AWAITING_SEED and _older(donation.awaiting_since, now, unseeded_ttl):
        return f"it was not seeded within {unseeded_ttl.total_seconds() / 3600:g} h"
    return None


async def _reap_donations(service: Loans) -> list[str]:
    done = []
    now = service.now()
    open_grants = {g.id for g in service.active_grants()}
    for donation in service.donations.list():
        if donation.id in service.in_flight:
            continue
        why = _why_clear(service, donation, open_grants, now)
        if why:
            await service.end(donation.id, why=why)
            done.append(donation.id)
    return done


async def _finish_removals(service: Loans) -> list[str]:
    done = []
    for donation_id in service.donations.pending_removals():
        if donation_id in service.in_flight:
            continue
        log.warning("the end of loan %s was left unfinished; finishing it", donation_id)
        await service.clean_up(donation_id)
        done.append(donation_id)
    return done
