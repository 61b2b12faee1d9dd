"""The Host: the composition root of the engine.

It wires settings, store, secrets, the driver, service, supervisor, probe,
the address watcher, lending and the control API, owns their tasks, and holds
the operations the tray, the headless runner and the control API call. What it
shows of a node is built by `host/core/views.py`; the address nodes advertise is
`host/core/netwatch.py`'s. Nothing here imports Qt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cadre_desktop.errors import CadreError, NoSuchThing
from cadre_desktop.host import live_settings
from cadre_desktop.host.core.address import ConfiguredAddress
from cadre_desktop.host.core.clock import Clock
from cadre_desktop.host.core.driver import NodeDriver
from cadre_desktop.host.core.events import EventBus, EventKind, HostEvent
from cadre_desktop.host.core.keyring_gate import KeyringGate
from cadre_desktop.host.core.lifecycle import Lifecycle
from cadre_desktop.host.core.lock import HostLock
from cadre_desktop.host.core.netwatch import AddressWatcher, restart_stale
from cadre_desktop.host.core.preflight import check_bind_host, prepare_home
from cadre_desktop.host.core.probe import HttpStatusFetcher, Probe, loopback_for
from cadre_desktop.host.core.records import SUPERVISED, NodeStatus
from cadre_desktop.host.core.secrets import SecretKind, SecretStore, move_legacy_entries
from cadre_desktop.host.core.service import NodeService
from cadre_desktop.host.core.store import KEYRING_LAYOUT, RecordStore
from cadre_desktop.host.core.supervisor import Supervisor, secret_kind
from cadre_desktop.host.core.views import NodeView, NodeViews
from cadre_desktop.host.drivers import make_driver
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)


class Host:
    #: `await host.apply_settings(new)`: take new settings while running (host/live_settings.py).
    apply_settings = live_settings.apply_settings

    def __init__(
        self,
        paths: Paths,
        settings: Settings,
        *,
        secrets: SecretStore | None = None,
        clock: Clock | None = None,
        serve_control_api: bool = True,
        address_source: Callable[[], str] | None = None,
    ) -> None:
        self.paths = paths
        self.settings = settings
        self.clock = clock or Clock()
        self.events = EventBus()
        self.secrets = secrets or SecretStore()
        self.store = RecordStore(paths.records_file)
        self.lifecycle = Lifecycle(store=self.store, events=self.events, clock=self.clock)
        self._lock = HostLock(paths.lock_file)
        self._serve_control_api = serve_control_api
        #: The one owner of the address nodes advertise; its loop runs from `start`.
        self.netwatch = AddressWatcher(
            source=address_source or ConfiguredAddress(paths.settings_file, settings), clock=self.clock,
            on_change=self._address_changed, on_wake=self._woke,
        )
        # Made by `start`, in this order, once every file was read and found good.
        self.gate: KeyringGate | None = None
        self.driver: NodeDriver | None = None
        self.probe: Probe | None = None
        self.supervisor: Supervisor | None = None
        self.service: NodeService | None = None
        self.views: NodeViews | None = None
        #: Grants, lent nodes and the lend API (host/lend_host.py).
        self.lending = None
        self.control = None
        self._tasks: list[asyncio.Future] = []
        self._started = False

    @property
    def advertise_host(self) -> str:
        """The address nodes are told to advertise now."""
        return self.netwatch.current

    # -- life ---------------------------------------------------------------------

    async def start(self) -> None:
        """Take the home, read the records, re-attach to live children, supervise.

        Refuses to start (and leaves every file as it is) when another host
        holds the home or a file it keeps is unreadable.
        """
        prepare_home(self.paths)  # one clear error for a home it cannot use, before anything
        self._lock.acquire()
        try:
            await self._start()
        except BaseException:
            await self._teardown(stop_nodes=False)
            raise

    async def _start(self) -> None:
        self._load_files()
        self.driver = make_driver(self.settings, self.paths, lambda: self.netwatch.current)
        report = await self.driver.init()
        # Only once every file was read and found good: an upgrade writes the records.
        self._bind_keyring()
        if report.attached:
            log.info("re-attached to %d running node(s)", len(report.attached))
        self._make_supervision()
        await self._prefetch_secrets()
        self._tasks.append(asyncio.ensure_future(self._move_keyring_entries()))
        await self.service.reap_stuck()
        self.lending.attach()  # lent nodes: the same supervisor, probe and gate, from the first pass
        self.supervisor.start(stopped_cleanly=report.stopped_cleanly)
        await self.lending.start()
        self.probe.start()
        # A new child is watched until it answers, rather than waiting out the interval.
        self.events.subscribe(lambda event: self.probe.watch_node(event.node_id) if event.node_id else None)
        self.netwatch.start()
        if self._serve_control_api:
            from cadre_desktop.host.edges.control import ControlServer

            self.control = ControlServer(self, self.paths.control_file)
            await self.control.start()
        self._started = True
        log.info("host started for %s (%d node(s))", self.paths.data_dir, len(self.store.list()))

    def _load_files(self) -> None:
        """Read every file the host keeps; a broken one stops the start and is left as it is."""
        self.paths.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store.load()
        from cadre_desktop.host.lend_host import Lending

        self.lending = Lending(self)
        self.lending.load()
        if self._serve_control_api:
            from cadre_desktop.host.edges.control import check_control_file

            # A control.json we cannot have written is refused, like every file we keep.
            check_control_file(self.paths.control_file)
        check_bind_host(self.settings.bind_host, str(self.paths.settings_file))

    def _make_supervision(self) -> None:
        """The keyring gate, the probe, the supervisor, the service and the views, over the driver."""
        s = self.settings
        self.gate = KeyringGate(self.secrets, sleep=self.clock.sleep, monotonic=self.clock.monotonic)
        interval = s.probe_interval_ms / 1000
        self.probe = Probe(
            lifecycle=self.lifecycle, driver=self.driver, clock=self.clock,
            interval_s=interval,
            fetch=HttpStatusFetcher(loopback_for(s.bind_host), timeout_s=min(2.0, max(0.2, interval)),
                                    fresh_after_s=min(2.5, interval / 2)),
            on_unresponsive=lambda _node_id: self.supervisor.kick("unresponsive"),
        )
        self.supervisor = Supervisor(
            lifecycle=self.lifecycle, driver=self.driver, gate=self.gate, settings=s, clock=self.clock,
            probe=self.probe, on_sweep=self._sweep_housekeeping,
        )
        self.service = NodeService(
            lifecycle=self.lifecycle, driver=self.driver, gate=self.gate,
            supervisor=self.supervisor, clock=self.clock,
        )
        gate = self.gate
        self.views = NodeViews(
            store=self.store, driver=self.driver, supervisor=self.supervisor, probe=self.probe,
            clock=self.clock, address=lambda: self.netwatch.current, log_path=self.paths.node_log,
            claim_secret=lambda node_id: gate.cached(node_id, SecretKind.CLAIM),
        )

    def _bind_keyring(self) -> None:
        """Key this home's keyring entries by its id; an upgraded records file is written
        first, so the id is on disk before any entry is named after it."""
        self.store.save_upgrade()
        lending = self.lending
        owns = self.store.knows if lending is None else lending.owns_or(self.store.knows)
        self.secrets.bind_home(self.store.home_id, owns, legacy=self.store.keyring_layout < KEYRING_LAYOUT)

    async def _move_keyring_entries(self) -> None:
        """Once, for a home from before home ids: its entries get their home-keyed names."""
        if not self.secrets.legacy:
            return
        ids = [r.id for r in self.store.list()] + self.store.pending_removals()
        ids += self.lending.ids() if self.lending is not None else []
        try:
            moved = await move_legacy_entries(self.secrets, ids)
            self.store.keyring_moved()
        except CadreError as exc:
            log.warning("keyring entries keep their old names for now (%s); they are read there "
                        "and moved at the next start", exc.message)
            return
        self.secrets.legacy = False
        log.info("moved %d keyring entr%s to names keyed by this home", moved, "y" if moved == 1 else "ies")

    async def _prefetch_secrets(self, wait_s: float = 2.0) -> None:
        """Read every supervised node's secret ahead, off the serial queue.

        The first pass waits for it at most `wait_s`: a keyring that is locked
        or hangs (an unlock prompt at login) must not hold up the host. Nodes
        whose secret has not arrived wait for it without spending their budget,
        and start the moment it does.
        """
        wanted = [(r.id, secret_kind(r)) for r in self.store.list()
                  if r.status in SUPERVISED or r.status is NodeStatus.ERROR]
        if not wanted:
            return
        task = asyncio.ensure_future(self.gate.prefetch(wanted))
        self._tasks.append(task)
        try:
            async with asyncio.timeout(wait_s):  # not wait_for: see secrets.SecretStore._run
                await asyncio.shield(task)
        except TimeoutError:
            log.warning("the keyring has not answered yet; nodes that need a secret wait for it")
        except Exception as exc:  # reading ahead only saves time: nodes read their secret again when they start
            log.error("reading secrets ahead failed: %s", exc)

    async def _sweep_housekeeping(self) -> None:
        await self.service.reap_stuck()
        if self.lending is not None and self.lending.service is not None:
            await self.lending.sweep()

    async def stop(self, stop_nodes: bool | None = None) -> None:
        """Stop serving; stop the nodes too unless `keep_nodes_running_on_quit`."""
        if stop_nodes is None:
            stop_nodes = not self.settings.keep_nodes_running_on_quit
        await self._teardown(stop_nodes=stop_nodes)

    def refresh(self) -> None:
        """Look at the network now (SIGHUP, or the OS said the network changed)."""
        self.netwatch.check_soon()

    def _woke(self, slept_s: float) -> None:
        if self.probe:
            self.probe.probe_soon()
        self.events.emit(EventKind.WOKE, "", f"{slept_s:.0f}")

    async def _address_changed(self, old: str, new: str) -> None:
        """Tell everyone (every claim URL changed); restart, one at a time, each running node
        that still advertises the old address, hosted then lent."""
        self.events.emit(EventKind.ADDRESS, "", new)
        for record in self.store.list():
            self.events.emit(EventKind.CHANGED, record.id)
        if self.service is None:
            return
        await restart_stale(self.store.list(), SUPERVISED, self.driver, self.service.restart, new, "node")
        if self.lending is not None and self.lending.service is not None:
            await self.lending.address_changed(new)

    async def _teardown(self, *, stop_nodes: bool) -> None:
        await self.netwatch.stop()
        if self.control is not None:
            await self.control.stop()
            self.control = None
        for part in (self.lending, self.probe, self.supervisor):
            # The supervisor before the driver: the exits its stops raise trigger no respawn.
            if part is not None:
                await part.stop()
        if self.gate is not None:
            await self.gate.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.driver is not None:
            if stop_nodes:
                await self.driver.stop_all()
            self.driver.close()
        self.secrets.close()
        self._lock.release()
        self._started = False

    # -- reads --------------------------------------------------------------------

    def subscribe(self, listener: Callable[[HostEvent], None]) -> Callable[[], None]:
        """Hear every engine event (the tray's bridge, the control API's event stream)."""
        return self.events.subscribe(listener)

    def list_nodes(self) -> list[NodeView]:
        return self.views.list() if self.views is not None else []

    def get_node(self, node_id: str) -> NodeView:
        if self.views is None:
            raise NoSuchThing(f"There is no node {node_id!r} on this host.")
        return self.views.get(node_id)

    def log_tail(self, node_id: str, lines: int = 200) -> list[str]:
        self.get_node(node_id)
        return self.driver.log_tail(node_id, lines, max_bytes=256 * 1024)

    # -- actions ----------------------------------------------------------------------

    async def add_node(self, name: str | None = None) -> NodeView:
        return self.views.of(await self.service.add(name))

    async def join_node(self, invitation: str, name: str | None = None) -> NodeView:
        return self.views.of(await self.service.join(invitation, name))

    async def retry_node(self, node_id: str) -> NodeView:
        return self.views.of(await self.service.retry(node_id))

    async def restart_node(self, node_id: str) -> NodeView:
        return self.views.of(await self.service.restart(node_id))

    async def regenerate_node(self, node_id: str) -> NodeView:
        return self.views.of(await self.service.regenerate(node_id))

    async def invite_node(self, node_id: str, name: str | None = None) -> NodeView:
        """A new node that joins the cadre of `node_id` (host/core/invite.py)."""
        from cadre_desktop.host.core.invite import invite_another

        return await invite_another(self, node_id, name)

    async def remove_node(self, node_id: str) -> bool:
        return await self.service.remove(node_id)
