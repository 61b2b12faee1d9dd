"""Lending inside the Host: its stores, service, views and lend API, wired and owned here.

The Host makes one `Lending` right after it loaded its records (so a broken
grants or donations file stops the start like any file the host keeps), and
starts it once the orchestrator has re-attached to the children that outlived
the last run. From then on a pass every `sweep_ms` finishes what a crash left
half-done, ends the loans that waited too long or whose grant ended, and opens
or closes the lend API's port as grants come and go.
"""

from __future__ import annotations

import asyncio
import logging

from cadre_desktop.host.donations import DonationStatus, DonationStore
from cadre_desktop.host.grants import GrantStore
from cadre_desktop.host.lend_api import LendServer, NodeSeedClient
from cadre_desktop.host.lend_views import LendingViews
from cadre_desktop.host.lending import LendingService
from cadre_desktop.host.probe import HttpStatusFetcher, loopback_for

log = logging.getLogger(__name__)


class Lending:
    def __init__(self, host) -> None:
        self.host = host
        self.grants = GrantStore(host.paths.grants_file)
        self.donations = DonationStore(host.paths.donations_file)
        self.service: LendingService | None = None
        self.views: LendingViews | None = None
        self.server: LendServer | None = None
        self._fetch: HttpStatusFetcher | None = None
        self._seed_client: NodeSeedClient | None = None
        self._task: asyncio.Task | None = None

    def load(self) -> None:
        """Read both files now; a broken one raises (and is left as it is)."""
        self.grants.load()
        self.donations.load()

    async def start(self) -> None:
        host, s = self.host, self.host.settings
        loopback = loopback_for(s.bind_host)
        self._fetch = HttpStatusFetcher(loopback, timeout_s=2.0)
        self._seed_client = NodeSeedClient(loopback)
        self.service = LendingService(
            grants=self.grants, donations=self.donations, orchestrator=host.orchestrator,
            secrets=host.secrets, events=host.events, clock=host.clock, settings=s,
            advertise_host=lambda: host.advertise_host,
            hosted_ports=lambda: {p for r in host.store.list() for p in (r.api_port, r.p2p_port) if p},
            fetch_status=self._fetch, post_seed=self._seed_client,
        )
        self.views = LendingViews(self.service, log_path=lambda d: str(host.paths.node_log(d)))
        self.server = LendServer(self.service, self.views, bind_host=s.bind_host, port=s.lend_port)
        self.service.on_grants_changed = self.server.sync
        await self.service.reap()
        await self.server.sync()
        self._task = asyncio.create_task(self._sweep_forever(), name="lending-sweep")

    async def _sweep_forever(self) -> None:
        while True:
            await self.host.clock.sleep(self.host.settings.sweep_ms / 1000)
            await self.sweep()

    async def sweep(self) -> None:
        """One pass: clear what waited too long, look at nodes still starting, follow the grants."""
        await self.service.reap()
        for donation in self.donations.list():
            if donation.status is DonationStatus.PROVISIONING and donation.handle:
                status = await self._fetch(donation.api_port) if donation.api_port else None
                if status is not None:
                    self.service.apply_status(donation.id, donation.handle, status)
        await self.server.sync()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.server is not None:
            await self.server.close()
        for client in (self._fetch, self._seed_client):
            if client is not None:
                await client.close()
