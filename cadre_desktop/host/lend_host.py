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
from collections.abc import Awaitable, Callable
from datetime import datetime

from cadre_desktop.errors import Bug
from cadre_desktop.host.core.clock import Clock
from cadre_desktop.host.core.driver import InstanceInfo, NodeDriver
from cadre_desktop.host.core.events import EventBus, EventKind
from cadre_desktop.host.core.ops.netwatch import restart_stale
from cadre_desktop.host.core.ops.service import NodeService
from cadre_desktop.host.core.records.lifecycle import Lifecycle
from cadre_desktop.host.core.records.records import NodeRecord
from cadre_desktop.host.core.supervision.probe import Probe, loopback_for
from cadre_desktop.host.core.supervision.supervisor import Supervisor
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.host.edges.lend_api import LendServer, NodeSeedClient
from cadre_desktop.host.lending.donations import DONATION_SUPERVISED, Donation, DonationStatus, DonationStore
from cadre_desktop.host.lending.grants import Grant, GrantStore
from cadre_desktop.host.lending.kind import DONATED
from cadre_desktop.host.lending.service import LendingService
from cadre_desktop.host.lending.views import LendingViews
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)


class Lending:
    """Grants, lent nodes and the lend API of one home; its collaborators come in typed, never the Host."""

    def __init__(self, *, paths: Paths, events: EventBus, clock: Clock) -> None:
        self.paths = paths
        self.grants = GrantStore(paths.grants_file)
        self.donations = DonationStore(paths.donations_file)
        self.lifecycle: Lifecycle[Donation] = Lifecycle(store=self.donations, events=events, clock=clock, kind=DONATED)
        self.clock = clock
        self.events = events
        self.service: LendingService | None = None
        self.views: LendingViews | None = None
        self.server: LendServer | None = None
        self._driver: NodeDriver | None = None
        self._restart: Callable[..., Awaitable[object]] | None = None

    def load(self) -> None:
        """Read both files now; a broken one raises (and is left as it is)."""
        self.grants.load()
        self.donations.load()

    def owns_or(self, hosted_knows: Callable[[str], bool]) -> Callable[[str], bool]:
        """Which ids' keyring entries this home may delete: its nodes', grants' and lent nodes'."""
        return lambda row_id: hosted_knows(row_id) or self.grants.knows(row_id) or self.donations.knows(row_id)

    def ids(self) -> list[str]:
        """Every grant and lent node this home has or had (their keyring entries are its)."""
        return ([g.id for g in self.grants.list()] + self.grants.pending_removals()
                + [d.id for d in self.donations.list()] + self.donations.pending_removals())

    def attach(self, *, hosted: Lifecycle[NodeRecord], supervisor: Supervisor, probe: Probe, gate: KeyringGate,
               driver: NodeDriver, nodes: NodeService, settings: Settings, advertise_host: Callable[[], str],
               keep_home: Callable[[], None], caps: Callable[[str], JSONObject] | None = None) -> None:
        """Join the host's supervision: same supervisor, probe, ports and keyring gate."""
        s = settings
        hosted.neighbours.append(self.lifecycle)
        self.lifecycle.neighbours.append(hosted)
        supervisor.watch(self.lifecycle)
        probe.watch(self.lifecycle)
        self._driver, self._restart = driver, nodes.restart
        self.service = LendingService(
            grants=self.grants, lifecycle=self.lifecycle, driver=driver, gate=gate,
            supervisor=supervisor, nodes=nodes, clock=self.clock, settings=s,
            advertise_host=advertise_host, post_seed=NodeSeedClient(loopback_for(s.bind_host)), keep_home=keep_home,
        )
        self.views = LendingViews(self.service, log_path=lambda d: str(self.paths.node_log(d)), caps=caps)
        self.server = LendServer(self.service, self.views, bind_host=s.bind_host, port=s.lend_port)
        self.views.lend_api = self.server.state
        self.service.on_grants_changed = self.sync_server
        # Seed tokens are read ahead, in the background: a lent node whose token has
        # not arrived waits for the keyring, like a hosted node, without spending budget.
        for donation in self.donations.list():
            if donation.status in DONATION_SUPERVISED or donation.status is DonationStatus.ERROR:
                gate.want(donation.id, SecretKind.SEED_TOKEN)

    def _attached(self) -> tuple[LendingService, LendServer]:
        if self.service is None or self.server is None:
            raise Bug("lending was used before it was attached to the host's supervision")
        return self.service, self.server

    async def start(self) -> None:
        await self.sweep()

    async def sweep(self) -> None:
        """At each supervisor sweep: clear what waited too long, follow the grants."""
        service, _ = self._attached()
        await service.reap()
        await self.sync_server()

    async def sync_server(self) -> None:
        """Open or close the lend API's port; a change of its state (listening, or the port
        taken) is a change of every active grant's view, and is told as one."""
        service, server = self._attached()
        before = server.state()
        await server.sync()
        if server.state() != before:
            for grant in service.active_grants():
                self.events.emit(EventKind.GRANT_CHANGED, grant.id)

    def running(self) -> list[tuple[Donation, InstanceInfo]]:
        """Each running lent node with its child (a new node program restarts them too)."""
        out = []
        for donation in self.donations.list():
            handle = self._driver.get(donation.handle) if self._driver and donation.handle else None
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
        if self._driver is not None and self._restart is not None:
            await restart_stale(self.donations.list(), DONATION_SUPERVISED, self._driver, self._restart, new, "lent node")

    # -- what the owner asks (the window, the tray); the control API asks the same ----------

    async def create_grant(self, label: object = None, max_nodes: object = None, expires_in_s: object = None) -> Grant:
        return await self._attached()[0].create_grant(label, max_nodes, expires_in_s)

    async def link_of(self, grant_id: str) -> str:
        return await self._attached()[0].link_of(grant_id)

    async def revoke_grant(self, grant_id: str) -> Grant:
        return await self._attached()[0].revoke_grant(grant_id)

    async def end_loan(self, donation_id: str) -> bool:
        return await self._attached()[0].end(donation_id, why="its owner ended it")

    async def retry(self, donation_id: str) -> Donation:
        return await self._attached()[0].retry(donation_id)

    async def pause(self, donation_id: str, *, for_ms: int | None = None, until: datetime | None = None) -> Donation:
        return await self._attached()[0].pause(donation_id, for_ms=for_ms, until=until)

    async def resume(self, donation_id: str) -> Donation:
        return await self._attached()[0].resume(donation_id)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()
