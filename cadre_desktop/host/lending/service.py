"""Lending: grants and the donated nodes lent under them, from request to the loan's end.

What the owner does (create, revoke, share a grant; retry or end a loan) and
what a borrower asks through the lend API (a node, its seed, the end of its
loan) come here. A lent node is supervised on the hosted nodes' core: its rows
change only through its lifecycle (host/lending/kind.py says what is particular
to it), it is started and stopped through the driver, kept running by the
same supervisor, and its seed token goes through the same keyring gate.

The same rules as for hosted nodes hold:

* The stores are synchronous, and nothing awaits between reading a row and
  writing it back; a row read before an await is re-read after it.
* A row is written before its keyring entry, and removed (with a tombstone)
  before its child, folder and keyring entry are cleaned up, so a host killed
  at any point leaves a row that the reaper (host/lending/reaper.py) finishes:
  never a child, a folder or a keyring entry that no row names.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import cast

from cadre_desktop.errors import Bug, CadreError, InputError, InvalidState, NodeFault, NoSuchThing, SecretsError, message_of
from cadre_desktop.host.core.clock import Clock, iso
from cadre_desktop.host.core.driver import NodeDriver
from cadre_desktop.host.core.events import EventKind, HostEvent
from cadre_desktop.host.core.ops.provision import Provisioning
from cadre_desktop.host.core.ops.service import NodeService
from cadre_desktop.host.core.records.lifecycle import Change, Lifecycle
from cadre_desktop.host.core.supervision.supervisor import Supervisor
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.host.lending.donations import Donation, DonationRequest, DonationStatus, DonationStore, is_donation_id, new_donation_id
from cadre_desktop.host.lending.grants import (
    Grant,
    GrantState,
    GrantStore,
    check_max_nodes,
    clean_label,
    expiry_after,
    grant_link,
    new_grant_id,
    new_token,
    token_digest,
)
from cadre_desktop.host.lending.reaper import reap
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)

#: How long a borrower's request may wait for its new node to answer before it is answered.
READY_WAIT_S = 10.0
_DUMMY_DIGEST = "0" * 64


class LendRefused(InputError):
    """The borrower's request cannot be served as asked (a wrong token, a full grant, a bad
    seed); `code` is stable and borrower-facing. The lend API gives each code its status."""


class WrongToken(LendRefused):
    """The token does not open this grant (or there is no such grant): one guess, for the lock-out."""

    code = "wrong_token"


class LentNodeUnavailable(NodeFault):
    """The lent node cannot take the borrower's request now (restarting, busy, not answering,
    refusing the host); `retry_after_s` says when to try again, if that may help."""


#: Presents a seed to the lent node on a port with its seed token: returns once the node took it;
#: raises LendRefused (the seed's fault) or LentNodeUnavailable (busy, silent, refusing the host).
SeedPost = Callable[[int, str, dict[str, object]], Awaitable[None]]


class LendingService:
    def __init__(
        self,
        *,
        grants: GrantStore,
        lifecycle: Lifecycle[Donation],
        driver: NodeDriver,
        gate: KeyringGate,
        supervisor: Supervisor,
        nodes: NodeService,
        clock: Clock,
        settings: Settings,
        advertise_host: Callable[[], str],
        post_seed: SeedPost,
        ready_wait_s: float = READY_WAIT_S,
        keep_home: Callable[[], None] = lambda: None,
    ) -> None:
        self.grants = grants
        self.lifecycle = lifecycle
        if not isinstance(lifecycle.store, DonationStore):
            raise Bug("lending's lifecycle must keep lent nodes")
        self.donations: DonationStore = lifecycle.store
        self.events = lifecycle.events
        self.driver = driver
        self.gate = gate
        self.supervisor = supervisor
        #: The node service: its Retry and Restart serve lent nodes too.
        self.nodes = nodes
        self.clock = clock
        self.settings = settings
        self.advertise_host = advertise_host
        self.post_seed = post_seed
        self.ready_wait_s = ready_wait_s
        #: Called before a keyring entry is named: the home id that names it must be on disk.
        self.keep_home = keep_home
        self.provisioning = Provisioning(lifecycle=lifecycle, gate=gate, starter=supervisor.starter, before_keyring=keep_home)
        #: Ids whose creation (or clean-up) is in flight; the reaper leaves them alone.
        self._creating: set[str] = set()
        self._removing: set[str] = set()
        #: The wall time last read and the monotonic time then (see `now`).
        self._anchor: tuple[datetime, float] | None = None
        #: Called after grants change, to open or close the lend API's port.
        self.on_grants_changed: Callable[[], Awaitable[None]] | None = None

    # -- reading ----------------------------------------------------------------------

    def now(self) -> datetime:
        """The wall clock, but never behind what it said before: a wall clock stepped back
        (by hand, or by a time sync) is read as the time last seen plus the monotonic time
        since, so an expiry once passed stays passed and no grant reopens."""
        wall, mono = self.clock.now(), self.clock.monotonic()
        if self._anchor is not None:
            seen, seen_mono = self._anchor
            counted = seen + timedelta(seconds=max(0.0, mono - seen_mono))
            if counted > wall:
                return counted
        self._anchor = (wall, mono)
        return wall

    def require_grant(self, grant_id: str) -> Grant:
        grant = self.grants.get(grant_id)
        if grant is None or grant.creating:
            raise NoSuchThing(f"There is no grant {grant_id[:40]!r} on this host.")
        return grant

    def require_donation(self, donation_id: str) -> Donation:
        donation = self.donations.get(donation_id)
        if donation is None:
            raise NoSuchThing(f"There is no lent node {donation_id[:40]!r} on this host.")
        return donation

    def active_grants(self) -> list[Grant]:
        now = self.now()
        return [g for g in self.grants.list() if g.state(now) is GrantState.ACTIVE]

    @property
    def in_flight(self) -> set[str]:
        """Ids a create or an end is working on in this run (the reaper leaves them alone)."""
        return self._creating | self._removing

    async def forget_token(self, row_id: str, kind: SecretKind) -> None:
        self.gate.drop(row_id)
        await self.gate.forget(row_id, (kind,))

    async def grants_changed(self) -> None:
        if self.on_grants_changed is not None:
            try:
                await self.on_grants_changed()
            except Exception as exc:  # the grant itself changed; the port follows at the next pass
                log.error("the lend API could not follow the change of grants: %s", exc)

    # -- grants (the owner) ----------------------------------------------------------------

    async def create_grant(self, label: object = None, max_nodes: object = None, expires_in_s: object = None) -> Grant:
        """A new active grant; its token goes to the keyring, its link is `link_of`."""
        max_nodes = check_max_nodes(max_nodes, self.settings.lend_max_nodes)
        now = self.now()
        expires = expiry_after(now, expires_in_s)
        grant_id = new_grant_id()
        while self.grants.get(grant_id) is not None:
            grant_id = new_grant_id()
        token = new_token()
        grant = Grant(
            id=grant_id, label=clean_label(label, f"Grant {len(self.grants.list()) + 1}"), max_nodes=max_nodes,
            token_sha256=token_digest(token), created_at=iso(now), updated_at=iso(now),
            expires_at=iso(expires) if expires else None, creating=True,
        )
        # The row first (marked creating): a host killed before the keyring write
        # leaves a row the reaper clears, never a keyring entry no row names.
        self._creating.add(grant_id)
        try:
            self.keep_home()
            self.grants.put(grant)
            try:
                await self.gate.store(grant_id, SecretKind.GRANT_TOKEN, token)
            except BaseException:
                self._unwind_grant(grant_id)
                raise
            current = self.grants.get(grant_id) or grant
            grant = current.replace(creating=False, updated_at=iso(self.now()))
            self.grants.put(grant)
        finally:
            self._creating.discard(grant_id)
        log.info("grant %s created (%s, up to %d node(s))", grant_id, grant.label, grant.max_nodes)
        self.events.emit(EventKind.GRANT_ADDED, grant_id)
        await self.grants_changed()
        return grant

    def _unwind_grant(self, grant_id: str) -> None:
        try:
            self.grants.remove(grant_id)
        except CadreError as exc:
            log.error("could not remove the row of failed grant %s (cleared later): %s", grant_id, exc.message)

    async def link_of(self, grant_id: str) -> str:
        """The grant link (with its token) of an active grant."""
        grant = self.require_grant(grant_id)
        state = grant.state(self.now())
        if state is not GrantState.ACTIVE:
            raise InvalidState(f"Grant {grant.label} is {state.value}; its link no longer works.")
        token = await self.gate.load(grant_id, SecretKind.GRANT_TOKEN)
        if token is None:
            raise SecretsError(f"The token of grant {grant.label} is missing from the keyring. Revoke the grant "
                               "and create a new one.")
        return grant_link(self.advertise_host(), self.settings.lend_port, grant_id, token)

    def cached_link(self, grant_id: str) -> str | None:
        """The link, if its token is in memory already (never waits for the keyring)."""
        grant = self.grants.get(grant_id)
        token = self.gate.cached(grant_id, SecretKind.GRANT_TOKEN)
        if grant is None or token is None or grant.state(self.now()) is not GrantState.ACTIVE:
            return None
        return grant_link(self.advertise_host(), self.settings.lend_port, grant_id, token)

    async def revoke_grant(self, grant_id: str) -> Grant:
        """Refuse the grant from now on, and end every loan made under it."""
        grant = self.require_grant(grant_id)
        if not grant.revoked_at:
            now = iso(self.now())
            grant = grant.replace(revoked_at=now, updated_at=now)
            self.grants.put(grant)
            log.info("grant %s revoked", grant_id)
            self.events.emit(EventKind.GRANT_CHANGED, grant_id)
        await self.close_grant(grant_id)
        await self.grants_changed()
        return self.grants.get(grant_id) or grant

    async def close_grant(self, grant_id: str) -> None:
        """End the loans of a revoked or expired grant and delete its token; then mark it closed."""
        for donation in self.donations.list():
            if donation.grant_id == grant_id:
                await self.end(donation.id, why=f"its grant {grant_id} ended")
        await self.forget_token(grant_id, SecretKind.GRANT_TOKEN)
        current = self.grants.get(grant_id)
        if current is not None and not current.closed_at:
            now = iso(self.now())
            self.grants.put(current.replace(closed_at=now, updated_at=now))
            self.events.emit(EventKind.GRANT_CHANGED, grant_id)

    # -- the borrower: authorisation and caps -------------------------------------------------------

    def authorize(self, grant_id: str, token: str | None) -> Grant:
        """The grant this token opens; 403 whatever is wrong, 410 once it ended.

        An unknown grant and a wrong token get the same answer, after the same
        work (one digest, one constant-time comparison), so the API is no oracle
        for which grant ids exist.
        """
        grant = self.grants.get(grant_id) if isinstance(grant_id, str) else None
        expected = grant.token_sha256 if grant is not None and not grant.creating else _DUMMY_DIGEST
        matches = hmac.compare_digest(token_digest(token or ""), expected)
        if not matches or grant is None or grant.creating or not token:
            raise WrongToken("this grant token is not valid for this grant")
        return self.still_open(grant)

    def still_open(self, grant: Grant) -> Grant:
        """The grant as its row says now, if it is still active; else the borrower's refusal.

        Every use of a grant after an await goes through here: a revoke or an
        expiry may have come meanwhile (a request whose body was still arriving).
        """
        current = self.grants.get(grant.id)
        state = GrantState.REVOKED if current is None else current.state(self.now())
        if state is GrantState.REVOKED:
            raise LendRefused("the owner of this host revoked this grant", code="grant_revoked")
        if state is not GrantState.ACTIVE or current is None:
            raise LendRefused("this grant has expired", code="grant_expired")
        return current

    def donation_in(self, grant: Grant, donation_id: str) -> Donation:
        donation = self.donations.get(donation_id) if is_donation_id(donation_id) else None
        if donation is None or donation.grant_id != grant.id:
            raise LendRefused("this grant has no such donation", code="donation_unknown")
        return donation

    # -- donations ----------------------------------------------------------------------------

    async def request(self, grant: Grant, wanted: DonationRequest) -> Donation:
        """Start a node for the borrower; answered once it awaits its seed (or after a bounded wait)."""
        # The grant re-read, the caps checked and the row written with no await in between:
        # a revoke meanwhile is refused, and two requests racing for the last place cannot both get it.
        grant = self.still_open(grant)
        if sum(1 for d in self.donations.list() if d.grant_id == grant.id) >= grant.max_nodes:
            raise LendRefused(f"this grant allows {grant.max_nodes} node(s), all lent", code="grant_full")
        if len(self.donations.list()) + len(self.donations.pending_removals()) >= self.settings.lend_max_nodes:
            raise LendRefused("this host lends no more nodes right now", code="host_full")
        donation_id = new_donation_id()
        while self.donations.get(donation_id) is not None or donation_id in self.donations.pending_removals():
            donation_id = new_donation_id()
        now = iso(self.now())
        self._creating.add(donation_id)
        try:
            await self._provision(Donation(
                id=donation_id, grant_id=grant.id, party_id=wanted.party_id, profile=wanted.profile,
                status=DonationStatus.PROVISIONING, bootstrap_nodes=wanted.bootstrap_nodes,
                owner_keys=wanted.owner_keys, created_at=now, updated_at=now,
            ))
        finally:
            self._creating.discard(donation_id)
        log.info("node %s lent to party %r under grant %s", donation_id, wanted.party_id, grant.id)
        await self._wait_answered(donation_id)
        grant = self.still_open(grant)  # revoked while its node started: the revoke ended the loan too
        return self.donation_in(grant, donation_id)

    async def _provision(self, donation: Donation) -> None:
        """Row, seed token, child (host/core/ops/provision.py); any failure ends the loan it began."""
        def grant_open(current: Donation) -> None:
            grant = self.grants.get(current.grant_id)
            if grant is None:
                raise LendRefused("the owner of this host revoked this grant", code="grant_revoked")
            self.still_open(grant)  # revoked or expired during the keyring's write

        await self.provisioning.create(
            donation, SecretKind.SEED_TOKEN, new_token(), still_wanted=grant_open,
            unwind=lambda row_id, _stored: self._unwind(row_id),
            gone=lambda: LendRefused("the loan ended while its node was being set up", code="donation_ended"),
        )

    async def _unwind(self, donation_id: str) -> None:
        try:
            if not await self.end(donation_id, why="its node could not be set up"):
                # Ended meanwhile: its seed token may have landed after that end deleted it.
                await self.gate.forget(donation_id, (SecretKind.SEED_TOKEN,))
        except Exception as exc:  # unwinding must not hide the error that made it; the reaper finishes it later
            message = message_of(exc)
            log.error("could not clear failed donation %s (retried later): %s", donation_id, message)

    async def _wait_answered(self, donation_id: str) -> None:
        """Until the new node answered (the probe moves it on), the loan ended, or the wait is over."""
        def settled() -> bool:
            row = self.donations.get(donation_id)
            return row is None or row.status is not DonationStatus.PROVISIONING

        if settled() or self.ready_wait_s <= 0:
            return
        done = asyncio.get_running_loop().create_future()

        def heard(event: HostEvent) -> None:
            if event.node_id == donation_id and settled() and not done.done():
                done.set_result(None)

        unsubscribe = self.events.subscribe(heard)
        try:
            async with asyncio.timeout(self.ready_wait_s):
                await done
        except TimeoutError:
            pass  # answered 201 still `provisioning`; the borrower polls
        finally:
            unsubscribe()

    async def seed(self, grant: Grant, donation_id: str, seed: object) -> Donation:
        """Present the borrower's seed to the node, with the seed token only the host knows."""
        grant = self.still_open(grant)  # its body arrived after the token was checked
        donation = self.donation_in(grant, donation_id)
        if donation.status is DonationStatus.PROVISIONING:
            raise LendRefused("the node is still starting; send the seed once its status is awaiting_seed",
                              code="not_ready", retry_after_s=2)
        if donation.status is DonationStatus.ERROR:
            raise LendRefused("the host gave up on this node; its owner can retry it", code="donation_failed")
        if not self.driver.is_running(donation.handle) or not donation.api_port:
            raise LentNodeUnavailable("the node is restarting; try again shortly", code="node_unavailable",
                                      retry_after_s=5)
        try:
            token = await self.gate.load(donation_id, SecretKind.SEED_TOKEN)
        except SecretsError:
            token = None
        if token is None:
            raise LentNodeUnavailable("the host cannot read this node's seed token from its keyring right now",
                                      code="node_unavailable", retry_after_s=30)
        grant = self.still_open(grant)  # the keyring read awaited: a revoke may have come meanwhile
        donation = self.donation_in(grant, donation_id)
        await self.post_seed(donation.api_port or 0, token, {"seed": seed})
        grant = self.still_open(grant)
        self.lifecycle.apply(donation_id, Change.SEEDED, lambda r: r.replace(
            status=DonationStatus.SEEDED, seeded_at=r.seeded_at or iso(self.now())), handle=donation.handle)
        return self.donation_in(grant, donation_id)

    async def retry(self, donation_id: str) -> Donation:
        """Bring a lent node back from `error` with a fresh budget: the one Retry, a hosted node's."""
        self.require_donation(donation_id)
        # The node service's Retry serves every kind; this id is a lent node's.
        return cast(Donation, await self.nodes.retry(donation_id))

    async def pause(self, donation_id: str, *, for_ms: int | None = None, until: datetime | None = None) -> Donation:
        """Hold a lent node, as a hosted node is held (its borrower sees it paused by its host)."""
        self.require_donation(donation_id)
        return cast(Donation, await self.nodes.pause(donation_id, for_ms=for_ms, until=until))

    async def resume(self, donation_id: str) -> Donation:
        """Start a held lent node now, its budget untouched."""
        self.require_donation(donation_id)
        return cast(Donation, await self.nodes.resume(donation_id))

    async def end(self, donation_id: str, why: str = "its loan ended") -> bool:
        """End a loan: row (with tombstone) first, then child, folder and seed token.

        The row goes first, so the exit that stopping the child raises finds
        nothing to start again, and a start already decided finds no row and is
        abandoned (nothing started, nothing counted).
        """
        existed = self.lifecycle.mark_removed(donation_id, announce_unborn=True)
        if existed:
            log.info("lent node %s: loan ended (%s)", donation_id, why)
        elif donation_id not in self.donations.pending_removals():
            return False
        await self.clean_up(donation_id)
        return existed

    async def clean_up(self, donation_id: str) -> None:
        self._removing.add(donation_id)
        try:
            self.gate.drop(donation_id)
            await self.driver.remove_node(donation_id)
            await self.gate.forget(donation_id, (SecretKind.SEED_TOKEN,))
            self.lifecycle.removal_done(donation_id)
        finally:
            self._removing.discard(donation_id)

    async def reap(self) -> list[str]:
        """One pass of the reaper (host/lending/reaper.py) over this service's grants and loans."""
        return await reap(self)
