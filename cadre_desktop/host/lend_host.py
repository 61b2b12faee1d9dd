"""Lending inside the Host: its stores, lifecycle, service, views and lend API, wired here.

The Host makes one `Lending` right after it loaded its records (so a broken
grants or donations file stops the start like any file the host keeps),
`attach`es it to the supervisor and the probe before their first pass (lent
nodes are supervised on the same core, the same passes and queue), and
`start`s it once supervision runs. Each sweep of the supervisor then also
finishes what a crash left half-done, ends the loans that waited too long or
whose grant ended, and opens or closes the lend API's port as grants come
and go.
"""

from __future__ import annotations

import logging
from typing import Any

from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.core.lifecycle import Lifecycle
from cadre_desktop.host.core.netwatch import restart_stale
from cadre_desktop.host.core.probe import loopback_for
from cadre_desktop.host.core.secrets import SecretKind
from cadre_desktop.host.edges.lend_api import LendServer, NodeSeedClient
from cadre_desktop.host.lending.donations import DONATION_SUPERVISED, DonationStatus, DonationStore
from cadre_desktop.host.lending.grants import GrantStore
from cadre_desktop.host.lending.kind import DONATED
from cadre_desktop.host.lending.service import LendingService
from cadre_desktop.host.lending.views import LendingViews
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)


class Lending:
    def __init__(self, host) -> None:
        self.host = host
        self.grants = GrantStore(host.paths.grants_file)
        self.donations = DonationStore(host.paths.donations_file)
        self.lifecycle = Lifecycle(store=self.donations, events=host.events, clock=host.clock, kind=DONATED)
        self.service: LendingService | None = None
        self.views: LendingViews | None = None
        self.server: LendServer | None = None
        self._seed_client: NodeSeedClient | None = None

    def load(self) -> None:
        """Read both files now; a broken one raises (and is left as it is)."""
        self.grants.load()
        self.donations.load()

    def owns_or(self, hosted_knows):
        """Which ids' keyring entries this home may delete: its nodes', grants' and lent nodes'."""
        return lambda row_id: hosted_knows(row_id) or self.grants.knows(row_id) or self.donations.knows(row_id)

    def ids(self) -> list[str]:
        """Every grant and lent node this home has or had (their keyring entries are its)."""
        return ([g.id for g in self.grants.list()] + self.grants.pending_removals()
                + [d.id for d in self.donations.list()] + self.donations.pending_removals())

    def attach(self) -> None:
        """Join the host's supervision: same supervisor, probe, ports and keyring gate."""
        host, s = self.host, self.host.settings
        host.lifecycle.neighbours.append(self.lifecycle)
        self.lifecycle.neighbours.append(host.lifecycle)
        host.supervisor.watch(self.lifecycle)
        host.probe.watch(self.lifecycle)
        self._seed_client = NodeSeedClient(loopback_for(s.bind_host))
        self.service = LendingService(
            grants=self.grants, lifecycle=self.lifecycle, driver=host.driver, gate=host.gate,
            supervisor=host.supervisor, nodes=host.service, clock=host.clock, settings=s,
            advertise_host=lambda: host.advertise_host, post_seed=self._seed_client,
            keep_home=host.store.persist_home,
        )
        self.views = LendingViews(self.service, log_path=lambda d: str(host.paths.node_log(d)))
        self.server = LendServer(self.service, self.views, bind_host=s.bind_host, port=s.lend_port)
        self.views.lend_api = self.server.state
        self.service.on_grants_changed = self.sync_server
        # Seed tokens are read ahead, in the background: a lent node whose token has
        # not arrived waits for the keyring, like a hosted node, without spending budget.
        for donation in self.donations.list():
            if donation.status in DONATION_SUPERVISED or donation.status is DonationStatus.ERROR:
                host.gate.want(donation.id, SecretKind.SEED_TOKEN)

    async def start(self) -> None:
        await self.service.reap()
        await self.sync_server()

    async def sweep(self) -> None:
        """At each supervisor sweep: clear what waited too long, follow the grants."""
        await self.service.reap()
        await self.sync_server()

    async def sync_server(self) -> None:
        """Open or close the lend API's port; a change of its state (listening, or the port
        taken) is a change of every active grant's view, and is told as one."""
        before = self.server.state()
        await self.server.sync()
        if self.server.state() != before:
            for grant in self.service.active_grants():
                self.host.events.emit(EventKind.GRANT_CHANGED, grant.id)

    def running(self) -> list[tuple[Any, Any]]:
        """Each running lent node with its child (a new node program restarts them too)."""
        out = []
        for donation in self.donations.list():
            handle = self.host.driver.get(donation.handle) if donation.handle else None
            if donation.status in DONATION_SUPERVISED and handle is not None and handle.alive:
                out.append((donation, handle))
        return out

    def use_settings(self, new: Settings) -> None:
        """Lending's numbers from now on (caps, TTLs); the lend API keeps the port it was
        started with (`lend_port` is read at start: live_settings.AT_START_ONLY)."""
        if self.service is not None:
            port = self.server.port if self.server is not None else new.lend_port
            self.service.settings = new.with_changes(lend_port=port)

    async def address_changed(self, new: str) -> None:
        """Restart, one at a time, each running lent node that still advertises the old address."""
        await restart_stale(self.donations.list(), DONATION_SUPERVISED, self.host.driver,
                            self.host.service.restart, new, "lent node")

    # -- what the owner asks (the window, the tray); the control API asks the same ----------

    async def create_grant(self, label=None, max_nodes=None, expires_in_s=None):
        return await self.service.create_grant(label, max_nodes, expires_in_s)

    async def link_of(self, grant_id: str) -> str:
        return await self.service.link_of(grant_id)

    async def revoke_grant(self, grant_id: str):
        return await self.service.revoke_grant(grant_id)

    async def end_loan(self, donation_id: str) -> bool:
        return await self.service.end(donation_id, why="its owner ended it")

    async def retry(self, donation_id: str):
        return await self.service.retry(donation_id)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()
        if self._seed_client is not None:
            await self._seed_client.close()
