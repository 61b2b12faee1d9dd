"""What the outside sees of grants and lent nodes.

Two audiences: the owner (the window, the CLI, the control API) sees
everything but secrets; the borrower (the lend API) sees its own donations,
their status, peer id, address and respawn counters, and never a token, a log
line or anything of another grant. No view ever holds a grant or seed token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.ops.views import hold_fields, last_exit_words
from cadre_desktop.host.lending.donations import DONATION_SUPERVISED, Donation
from cadre_desktop.host.lending.grants import Grant
from cadre_desktop.jsontypes import JSONObject, JSONValue
from cadre_desktop.text import url_host

if TYPE_CHECKING:
    from cadre_desktop.host.core.driver import InstanceInfo
    from cadre_desktop.host.core.supervision.supervisor import Supervisor
    from cadre_desktop.host.lending.service import LendingService


@dataclass(frozen=True)
class LendApiState:
    """Whether borrowers can reach the host: the lend API listens, or why not."""

    #: It accepts connections now.
    listening: bool
    #: Where it listens, or would: bind_host:lend_port.
    address: str
    #: Why it does not listen though a grant is active (the port is taken, ...), else None.
    error: str | None = None


#: Before the lend API was asked (a view built with no server).
NO_LEND_API = LendApiState(listening=False, address="")


def unreachable_words(status: str, lend_api: LendApiState) -> str | None:
    """What an owner must know about an active grant nobody can reach, else None."""
    if status != "active" or lend_api.listening:
        return None
    why = lend_api.error or f"the lend API is not listening on {lend_api.address or 'its port'} yet"
    return (f"borrowers cannot reach this host: {why}. Free the port, or change 'lend_port' in "
            "settings.json (the host tries again at every pass).")


@dataclass(frozen=True)
class GrantView:
    id: str
    label: str
    #: active, expired or revoked (creating only while a create is in flight)
    status: str
    max_nodes: int
    #: Every lent node under it, whatever its status.
    nodes: int
    expires_at: str | None
    created_at: str
    revoked_at: str | None
    #: The lend API's state: an active grant is of use only while it listens.
    lend_api: LendApiState = NO_LEND_API

    @property
    def unreachable(self) -> str | None:
        """Words for an active grant that borrowers cannot reach, else None."""
        return unreachable_words(self.status, self.lend_api)

    def to_json(self) -> JSONObject:
        view: JSONObject = asdict(self)
        view["unreachable"] = self.unreachable
        return view


@dataclass(frozen=True)
class DonationView:
    id: str
    grant_id: str
    grant_label: str
    party_id: str
    profile: str
    status: str
    running: bool
    pid: int | None
    api_port: int | None
    p2p_port: int | None
    #: Where the borrower's party reaches the node: advertised host and P2P port.
    address: str | None
    peer_id: str | None
    attempts: int
    next_retry_at: str | None
    last_error: str | None
    #: What ended its last start ("exited with code 1: ..."), while that matters.
    last_exit: str | None
    #: "keyring" while its start waits for the keyring, else None.
    waiting_for: str | None
    #: While held (paused, sleeping, done): when it wakes, who holds it ("person": its owner;
    #: "node": itself) and why.
    wake_at: str | None
    held_by: str | None
    hold_reason: str | None
    #: The supervisor's last decision about it: decision, at, ms, error.
    last_decision: JSONObject | None
    #: False on a row without every input of its first start: it is not restarted.
    respawnable: bool
    created_at: str
    updated_at: str
    seeded_at: str | None
    started_at: str | None
    log_path: str
    #: What it may use and how the OS holds it to that: the host's caps (a lent node has none of its own).
    caps: JSONObject | None = None

    def to_json(self) -> JSONObject:
        return asdict(self)


def grant_view(grant: Grant, nodes: int, now: datetime, lend_api: LendApiState = NO_LEND_API) -> GrantView:
    return GrantView(
        id=grant.id, label=grant.label, status=grant.state(now).value, max_nodes=grant.max_nodes,
        nodes=nodes, expires_at=grant.expires_at, created_at=grant.created_at, revoked_at=grant.revoked_at,
        lend_api=lend_api,
    )


def donation_view(
    donation: Donation,
    *,
    grant: Grant | None,
    handle: InstanceInfo | None,
    advertise_host: str,
    next_retry: datetime | None,
    log_path: str,
    supervisor: Supervisor | None = None,
    caps: JSONObject | None = None,
    unsaved: bool = False,
    save_problem: str | None = None,
) -> DonationView:
    """`unsaved`: `handle` is a live child the row does not name yet (its write failed, as on a
    full disk): its pid and ports are shown, and `save_problem` says why the row lags."""
    running = bool(handle and handle.alive)
    host = handle.advertise_host if handle and running and handle.advertise_host else advertise_host
    p2p_port = handle.p2p_port if handle and unsaved else donation.p2p_port
    return DonationView(
        id=donation.id,
        grant_id=donation.grant_id,
        grant_label=grant.label if grant else "",
        party_id=donation.party_id,
        profile=donation.profile,
        status=donation.status.value,
        running=running,
        pid=handle.pid if handle and running else None,
        api_port=handle.api_port if handle and unsaved else donation.api_port,
        p2p_port=p2p_port,
        address=f"{url_host(host)}:{p2p_port}" if p2p_port else None,
        peer_id=donation.peer_id,
        attempts=donation.attempts,
        next_retry_at=iso(next_retry) if next_retry else None,
        last_error=_with_save_problem(donation.error, save_problem),
        last_exit=last_exit_words(donation, running, supervisor),
        waiting_for="keyring" if supervisor and supervisor.waiting_for_keyring(donation.id) else None,
        **hold_fields(donation, supervisor),
        last_decision=supervisor.last_decision(donation.id) if supervisor else None,
        respawnable=donation.respawnable,
        created_at=donation.created_at,
        updated_at=donation.updated_at,
        seeded_at=donation.seeded_at,
        started_at=handle.started_at if handle and running else None,
        log_path=log_path,
        caps=caps,
    )


#: How a lent node that runs but whose row could not be saved is told (the owner gets the reason too).
NOT_SAVED = "running, but not saved yet"


def _with_save_problem(error: str | None, save_problem: str | None) -> str | None:
    if save_problem is None:
        return error
    return f"{error}; {save_problem}" if error else save_problem


def borrower_view(view: DonationView, donation: Donation, *, unsaved: bool = False) -> JSONObject:
    """The borrower's part of a lent node: no pid, port layout, log, or the owner's label (nor
    the owner's file paths: a row not saved is told without the reason's details)."""
    error = (donation.error or "").splitlines()[0][:300] if donation.error else None
    if unsaved:
        note = f"{NOT_SAVED} on the lender's computer (its disk may be full)"
        error = f"{error}; {note}" if error else note
    return {
        "id": view.id,
        "grant_id": view.grant_id,
        "party_id": view.party_id,
        "profile": view.profile,
        "status": view.status,
        "running": view.running,
        "peer_id": view.peer_id,
        "address": view.address,
        "bootstrap_nodes": list(donation.bootstrap_nodes or ()),
        "owner_keys": list(donation.owner_keys or ()),
        "respawn": {
            "attempts": view.attempts,
            "last_attempt_at": donation.respawn.last_attempt_at if donation.respawn else None,
            "next_retry_at": view.next_retry_at,
        },
        "error": error,
        # A hold said to the borrower: by the host that runs it (its owner), or by the node itself.
        "held_by": {"person": "host", "conditions": "host"}.get(view.held_by or "", view.held_by),
        "wake_at": view.wake_at,
        "created_at": view.created_at,
        "seeded_at": view.seeded_at,
    }


def borrower_grant(grant: Grant, now: datetime, donations: list[JSONValue]) -> JSONObject:
    return {
        "id": grant.id,
        "label": grant.label,
        "status": grant.state(now).value,
        "max_nodes": grant.max_nodes,
        "expires_at": grant.expires_at,
        "donations": donations,
    }


class LendingViews:
    """Views read fresh from the stores, the driver and the supervisor, for every audience."""

    def __init__(self, service: LendingService, *, log_path: Callable[[str], str],
                 caps: Callable[[str], JSONObject] | None = None,
                 lend_api: Callable[[], LendApiState] = lambda: NO_LEND_API) -> None:
        self.service = service
        self.log_path = log_path
        self.caps = caps
        #: The lend API's state now (host/lend_host.py gives the server's).
        self.lend_api = lend_api

    def grants(self) -> list[GrantView]:
        now, lend_api = self.service.now(), self.lend_api()
        counts: dict[str, int] = {}
        for d in self.service.donations.list():
            counts[d.grant_id] = counts.get(d.grant_id, 0) + 1
        return [grant_view(g, counts.get(g.id, 0), now, lend_api)
                for g in self.service.grants.list() if not g.creating]

    def grant(self, grant_id: str) -> GrantView:
        grant = self.service.require_grant(grant_id)
        return grant_view(grant, len(self.service.donations.of_grant(grant_id)), self.service.now(), self.lend_api())

    def link(self, grant_id: str) -> str | None:
        """The grant link if its token is in memory (the window never waits for the keyring)."""
        return self.service.cached_link(grant_id)

    def donations(self, grant_id: str | None = None) -> list[DonationView]:
        rows = self.service.donations.of_grant(grant_id) if grant_id else self.service.donations.list()
        return [self._view(d) for d in rows]

    def donation(self, donation_id: str) -> DonationView:
        return self._view(self.service.require_donation(donation_id))

    def _live(self, donation: Donation) -> tuple[InstanceInfo | None, bool]:
        """The child the row names, or else a live child of the lent node the row does not
        name yet (the write after its start failed); and whether it is the latter."""
        handle = self.service.driver.get(donation.handle)
        if (handle and handle.alive) or donation.status not in DONATION_SUPERVISED:
            return handle, False
        alive = [h for h in self.service.driver.handles_for(donation.id) if h.alive]
        return (alive[-1], True) if alive else (handle, False)

    def _not_saved(self, donation: Donation) -> bool:
        """Whether what the view shows is not on disk: a live child the row does not name, or a
        row whose grouped write (a start the pass made) failed and is being written again."""
        return self._live(donation)[1] or donation.id in self.service.donations.unsaved

    def _save_problem(self) -> str:
        service = self.service
        why = service.donations.save_error or service.driver.save_error
        return f"{NOT_SAVED}: {why}" if why else NOT_SAVED

    def _view(self, donation: Donation) -> DonationView:
        service = self.service
        supervisor = service.supervisor
        handle, unsaved = self._live(donation)
        next_retry = None
        if supervisor is not None and not (handle and handle.alive):
            when = supervisor.next_attempt_at(donation)
            next_retry = when if when is not None and when > service.now() else None
        return donation_view(
            donation, grant=service.grants.get(donation.grant_id), handle=handle,
            advertise_host=service.advertise_host(), next_retry=next_retry, log_path=self.log_path(donation.id),
            supervisor=supervisor, caps=self.caps(donation.id) if self.caps else None,
            unsaved=unsaved,
            save_problem=self._save_problem() if unsaved or donation.id in service.donations.unsaved else None,
        )

    def log_tail(self, donation_id: str, lines: int = 200) -> list[str]:
        """The last lines of a lent node's log (a bounded read from the end)."""
        self.service.require_donation(donation_id)
        return self.service.driver.log_tail(donation_id, lines, max_bytes=256 * 1024)

    def for_borrower(self, donation: Donation) -> JSONObject:
        return borrower_view(self._view(donation), donation, unsaved=self._not_saved(donation))

    def grant_for_borrower(self, grant: Grant) -> JSONObject:
        rows: list[JSONValue] = [self.for_borrower(d) for d in self.service.donations.of_grant(grant.id)]
        return borrower_grant(grant, self.service.now(), rows)
