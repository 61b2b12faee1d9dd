"""The Host: the composition root of the engine.

It wires settings, store, secrets, the writer, the driver, service, supervisor, probe, the address
watcher, lending and the control API, owns their tasks, and holds the operations the tray, the
headless runner and the control API call. What it shows of a node is built by `host/core/ops/views.py`;
the address nodes advertise is `host/core/ops/netwatch.py`'s. Nothing here imports Qt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadre_desktop.errors import Bug, CadreError, InvalidState, NoSuchThing
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.conditions.judge import Judge, platform_sources
from cadre_desktop.host.conditions.source import ConditionSource
from cadre_desktop.host.core.clock import Clock
from cadre_desktop.host.core.driver import NodeCaps, NodeDriver
from cadre_desktop.host.core.events import EventBus, EventKind, HostEvent
from cadre_desktop.host.core.ops.address import ConfiguredAddress
from cadre_desktop.host.core.ops.caps import caps_view, check_caps_change, node_caps
from cadre_desktop.host.core.ops.history import NodeHistory, start_history
from cadre_desktop.host.core.ops.netwatch import AddressWatcher, restart_stale
from cadre_desktop.host.core.ops.service import NodeService
from cadre_desktop.host.core.ops.views import NodeView, NodeViews
from cadre_desktop.host.core.records.lifecycle import Change, Lifecycle
from cadre_desktop.host.core.records.lock import HostLock
from cadre_desktop.host.core.records.preflight import check_bind_host, prepare_home
from cadre_desktop.host.core.records.records import SUPERVISED, NodeRecord, NodeStatus
from cadre_desktop.host.core.records.rowstore import RowStore
from cadre_desktop.host.core.records.store import KEYRING_LAYOUT, RecordStore
from cadre_desktop.host.core.supervision import orphans
from cadre_desktop.host.core.supervision.host_holds import HostHolds
from cadre_desktop.host.core.supervision.passes import PassSchedule
from cadre_desktop.host.core.supervision.probe import WAIT_S, HttpStatusFetcher, Probe, loopback_for
from cadre_desktop.host.core.supervision.runfile import RunFiles
from cadre_desktop.host.core.supervision.supervisor import Supervisor, secret_kind
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretKind, SecretStore, move_legacy_entries
from cadre_desktop.host.drivers import make_driver
from cadre_desktop.host.fleet.fleet import Fleet, FleetFile
from cadre_desktop.host.fleetrun.run import FleetRun
from cadre_desktop.host.lend_host import Lending
from cadre_desktop.host.lending.donations import Donation
from cadre_desktop.host.live_settings import Applied, LiveSettings
from cadre_desktop.host.wiring import supervise
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings

if TYPE_CHECKING:
    from cadre_desktop.host.edges.control import ControlServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Parts:
    """What a started host runs on: made together by `Host.start`, in this order."""

    driver: NodeDriver
    gate: KeyringGate
    probe: Probe
    supervisor: Supervisor
    service: NodeService
    views: NodeViews


class Host:
    def __init__(
        self,
        paths: Paths,
        settings: Settings,
        *,
        secrets: SecretStore | None = None,
        clock: Clock | None = None,
        serve_control_api: bool = True,
        address_source: Callable[[], str] | None = None,
        condition_sources: Sequence[ConditionSource] | None = None,
    ) -> None:
        self.paths = paths
        self.settings = settings
        self.clock = clock or Clock()
        self.events = EventBus()
        self.secrets = secrets or SecretStore()
        self.store = RecordStore(paths.records_file)
        self.writer = GroupWriter()  # the records and state.json are written on its thread
        self.lifecycle = Lifecycle(store=self.store, events=self.events, clock=self.clock)
        self._lock = HostLock(paths.lock_file)
        self._serve_control_api = serve_control_api
        #: The one owner of the address nodes advertise; its loop runs from `start`.
        self.netwatch = AddressWatcher(
            source=address_source or ConfiguredAddress(paths.settings_file, settings), clock=self.clock,
            on_change=self._address_changed, on_wake=self._woke,
        )
        self._parts: Parts | None = None  # what `start` makes, once every file was read and found good
        self.lending: Lending | None = None  # grants, lent nodes, the lend API (host/lend_host.py); made then too
        self.control: ControlServer | None = None
        self._tasks: list[asyncio.Future[None]] = []
        self.history: NodeHistory | None = None  # each node's history (host/core/ops/history.py), from start on
        #: Pause all and the run conditions' verdict: the hold each node should have (host/core/supervision/host_holds.py).
        self.host_holds = HostHolds(paths.pause_file, self.clock)
        self._condition_sources = condition_sources  # the run conditions' sources, else this platform's
        self.judge: Judge | None = None
        self.fleet: Fleet | None = None  # the computers paired with this one (host/fleet/), read at start
        self.fleetrun: FleetRun | None = None  # its etcd member, shared state and moves (host/fleetrun/), from start
        self._started = False

    # The parts `start` made, None before it (front ends and tests read them).
    @property
    def driver(self) -> NodeDriver | None:
        return self._parts.driver if self._parts else None

    @property
    def gate(self) -> KeyringGate | None:
        return self._parts.gate if self._parts else None

    @property
    def probe(self) -> Probe | None:
        return self._parts.probe if self._parts else None

    @property
    def supervisor(self) -> Supervisor | None:
        return self._parts.supervisor if self._parts else None

    @property
    def service(self) -> NodeService | None:
        return self._parts.service if self._parts else None

    @property
    def views(self) -> NodeViews | None:
        return self._parts.views if self._parts else None

    def _running(self) -> Parts:
        if self._parts is None:
            raise Bug("the host was asked to act before it started")
        return self._parts

    @property
    def advertise_host(self) -> str:  # the address nodes are told to advertise now
        return self.netwatch.current

    # -- life ---------------------------------------------------------------------

    @property
    def started(self) -> bool:  # `start` finished and `stop` has not begun: every operation may be called
        return self._started

    def take_home(self) -> None:
        """Check the home is usable and take it (one host per home: `HostBusy` when another has it).
        Cheap and synchronous, and the first thing `start` does; the tray app calls it before its icon
        shows, so a second app never shows one. Taken, it is released by `stop` (or a failed `start`)."""
        if self._lock.held:
            return
        prepare_home(self.paths)  # one clear error for a home it cannot use, before anything
        self._lock.acquire()

    async def start(self) -> None:
        """Take the home (unless `take_home` did), read the records, re-attach to live children, supervise.

        Refuses to start (and leaves every file as it is) when another host holds the home or a file it
        keeps is unreadable. Before it ends, every read is safe and answers as for an empty home while
        nothing is read yet (`list_nodes` empty, `lending`, `driver` and the other parts None); the operations raise `Bug`.
        """
        self.take_home()
        try:
            await self._start()
        except BaseException:
            await self._teardown(stop_nodes=False)
            raise

    async def _start(self) -> None:
        lending = self._load_files()
        driver = make_driver(self.settings, self.paths, lambda: self.netwatch.current,
                             caps_for=self._caps_for, home_id=self.store.home_id, writer=self.writer)
        self.store.use_writer(self.writer)
        lending.donations.use_writer(self.writer)  # a lent node's respawn writes off the loop too
        report = await driver.init()
        # Only once every file was read and found good: an upgrade writes the records.
        self._bind_keyring()
        if report.attached:
            log.info("re-attached to %d running node(s)", len(report.attached))
        p = self._parts = self._make_supervision(driver)
        self.history = start_history(self.paths.history_file, self.clock, p.views, self.events, list(self.store.load()), self.writer)
        await self._prefetch_secrets()
        self._tasks.append(asyncio.ensure_future(self._move_keyring_entries()))
        await p.service.reap_stuck()
        # Lent nodes: the same supervisor, probe and gate, from the first pass.
        lending.attach(hosted=self.lifecycle, supervisor=p.supervisor, probe=p.probe, gate=p.gate, driver=driver, nodes=p.service,
                       settings=self.settings, advertise_host=lambda: self.advertise_host, keep_home=self.store.persist_home,
                       caps=lambda donation_id: self._caps_view(None, donation_id))
        self.host_holds.kick = p.supervisor.kick
        self.host_holds.start()
        injected = self._condition_sources
        judge = self.judge = Judge(self.settings, self.clock,
                                   platform_sources(self.settings) if injected is None else injected,
                                   on_change=self.host_holds.conditions_changed,
                                   make_sources=platform_sources if injected is None else None)
        self.host_holds.conditions = judge
        await judge.start()  # the first verdict before the first pass: nothing starts to be stopped at once
        self.fleetrun = FleetRun.wire(  # before the first pass: every start of a failover node carries its lease terms
            fleet=self.fleet, settings=lambda: self.settings, paths=self.paths, secrets=self.secrets, service=p.service, views=p.views,
            get_node=self.get_node, pause=self.pause_node, resume=self.resume_node, advertise=lambda: self.advertise_host,
            restart=self.restart_node, starter=p.supervisor.starter, observer=p.supervisor.observer, events=self.events) if self.fleet else None
        p.supervisor.start(stopped_cleanly=report.stopped_cleanly)
        await lending.start()
        p.probe.start()
        # A new child is watched until it answers, rather than waiting out the interval.
        self.events.subscribe(lambda event: p.probe.watch_node(event.node_id) if event.node_id else None)
        self.netwatch.start()
        if self._serve_control_api:
            from cadre_desktop.host.edges.control import ControlServer

            self.control = ControlServer(self, self.paths.control_file)
            await self.control.start()
        await self.fleet.start() if self.fleet is not None else None
        self.fleetrun.start() if self.fleetrun is not None else None  # a task of its own: the start never waits on etcd
        self._started = True
        log.info("host started for %s (%d node(s))", self.paths.data_dir, len(self.store.list()))

    def _load_files(self) -> Lending:
        """Read every file the host keeps; a broken one stops the start and is left as it is."""
        self.paths.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store.load()
        lending = self.lending = Lending(paths=self.paths, events=self.events, clock=self.clock)
        lending.load()
        self.host_holds.load()
        self.fleet = Fleet.read(FleetFile(self.paths.fleet_file), lambda: self.settings, self.secrets, self.clock, self, lambda: self.advertise_host)
        if self._serve_control_api:
            from cadre_desktop.host.edges.control import check_control_file

            # A control.json we cannot have written is refused, like every file we keep.
            check_control_file(self.paths.control_file)
        check_bind_host(self.settings.bind_host, str(self.paths.settings_file))
        return lending

    def _make_supervision(self, driver: NodeDriver) -> Parts:
        """The keyring gate, the probe, the supervisor, the service and the views, over the driver."""
        s = self.settings
        gate = KeyringGate(self.secrets, sleep=self.clock.sleep, monotonic=self.clock.monotonic)
        interval, passes = s.probe_interval_ms / 1000, PassSchedule(self.clock)
        probe = Probe(
            lifecycle=self.lifecycle, driver=driver, clock=self.clock, interval_s=interval,
            fetch=HttpStatusFetcher(loopback_for(s.bind_host), timeout_s=min(2.0, max(0.2, interval)),
                                    fresh_after_s=min(2.5, interval / 2)),
            long_poll_s=WAIT_S,  # a node waiting for its claim is waited on, not asked every two seconds
            # News to judge (an answer, a claim, a failed invitation, silence): one coalesced pass.
            on_news=lambda _node_id: passes.after_exit(),
        )
        supervisor = supervise(
            lifecycle=self.lifecycle, driver=driver, gate=gate, settings=s, clock=self.clock, passes=passes,
            probe=probe, on_sweep=self._sweep_housekeeping, run_files=RunFiles(self.paths.node_dir),
            host_hold=self.host_holds.wanted,
        )
        service = NodeService(lifecycle=self.lifecycle, driver=driver, gate=gate, supervisor=supervisor,
                              kinds=supervisor.kinds, starter=supervisor.starter, clock=self.clock)
        views = NodeViews(
            store=self.store, driver=driver, supervisor=supervisor, probe=probe,
            clock=self.clock, address=lambda: self.netwatch.current, log_path=self.paths.node_log,
            claim_secret=lambda node_id: gate.cached(node_id, SecretKind.CLAIM), caps=self._caps_view,
            computer=lambda: self.fleet.self_ref() if self.fleet else None)
        return Parts(driver=driver, gate=gate, probe=probe, supervisor=supervisor, service=service, views=views)

    def _caps_for(self, node_id: str) -> NodeCaps:
        """The caps of a node's next start: its record's, else the settings' (read at each start)."""
        return node_caps(self.store.get(node_id), self.settings)

    def _caps_view(self, record: NodeRecord | None, node_id: str | None = None) -> dict[str, Any]:  # typed apart by their users
        """A view's `caps`: a node's next start's, and how the driver holds it to them (its child, as the OS does)."""
        caps = node_caps(record, self.settings)
        return caps_view(caps, self._running().driver.caps_enforcement(caps, node_id or getattr(record, "id", None)))

    def _bind_keyring(self) -> None:
        """Key this home's keyring entries by its id; an upgraded records file is written first (the id on disk before any entry)."""
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
            log.warning("keyring entries keep their old names for now (%s); they are read there and moved at the next start", exc.message)
            return
        self.secrets.legacy = False
        log.info("moved %d keyring entr%s to names keyed by this home", moved, "y" if moved == 1 else "ies")

    async def _prefetch_secrets(self, wait_s: float = 2.0) -> None:
        """Read every supervised node's secret ahead, off the serial queue. The first pass waits for it at most `wait_s`: a
        keyring that is locked or hangs (an unlock prompt at login) must not hold up the host. Nodes whose secret has not
        arrived wait for it without spending their budget, and start the moment it does."""
        wanted = [(r.id, secret_kind(r)) for r in self.store.list() if r.status in SUPERVISED or r.status is NodeStatus.ERROR]
        if not wanted:
            return
        task = asyncio.ensure_future(self._running().gate.prefetch(wanted))
        self._tasks.append(task)
        try:
            async with asyncio.timeout(wait_s):  # not wait_for: see secrets.SecretStore._run
                await asyncio.shield(task)
        except TimeoutError:
            log.warning("the keyring has not answered yet; nodes that need a secret wait for it")
        except Exception as exc:  # reading ahead only saves time: nodes read their secret again when they start
            log.error("reading secrets ahead failed: %s", exc)

    async def _sweep_housekeeping(self) -> None:
        await self._running().service.reap_stuck()
        if self.lending is not None and self.lending.service is not None:
            await self.lending.sweep()

    async def stop(self, stop_nodes: bool | None = None) -> None:
        """Stop serving; stop the nodes too unless `keep_nodes_running_on_quit`."""
        await self._teardown(stop_nodes=not self.settings.keep_nodes_running_on_quit if stop_nodes is None else stop_nodes)

    async def apply_settings(self, new: Settings) -> Applied:  # take new settings while running (host/live_settings.py)
        old, self.settings = self.settings, new
        return await LiveSettings(store=self.store, driver=self.driver, service=self.service, supervisor=self.supervisor,
                                  lending=self.lending, judge=self.judge, refresh=self.refresh).apply(old, new)

    def refresh(self) -> None:  # look at the network now (SIGHUP, or the OS said the network changed)
        self.netwatch.check_soon()

    def _woke(self, slept_s: float) -> None:
        if self.probe:
            self.probe.probe_soon()
        self.events.emit(EventKind.WOKE, "", f"{slept_s:.0f}")

    async def _address_changed(self, old: str, new: str) -> None:
        """Tell everyone (every claim URL changed); restart, one at a time, each node on the old one."""
        self.events.emit(EventKind.ADDRESS, "", new)
        for record in self.store.list():
            self.events.emit(EventKind.CHANGED, record.id)
        if self._parts is None:
            return
        await restart_stale(self.store.list(), SUPERVISED, self._parts.driver, self._parts.service.restart, new, "node")
        if self.lending is not None and self.lending.service is not None:
            await self.lending.address_changed(new)

    async def _teardown(self, *, stop_nodes: bool) -> None:
        await self.netwatch.stop()
        if self.control is not None:
            await self.control.stop()
            self.control = None
        await self.host_holds.stop()
        if self.judge is not None:
            await self.judge.stop()
        for part in (self.lending, self.probe, self.supervisor):  # the supervisor before the driver: its stops respawn nothing
            if part is not None:
                await part.stop()
        for fleet_part in (self.fleetrun, self.fleet):  # after the supervisor: a failover node past its lease respawns not
            await fleet_part.stop() if fleet_part is not None else None
        if self.gate is not None:
            await self.gate.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._parts is not None:
            if stop_nodes:
                # Orphans are not this host's to stop: left running, and said so once.
                left = orphans.find_orphans(self._parts.driver, self._parts.supervisor.kinds.lifecycles)
                orphans.report(left, at_quit=True)
                await self._parts.driver.stop_all(leave=frozenset(h.node_id for h in left))
            self._parts.driver.close()
        for store in self._row_stores():
            store.use_writer(None)
        await asyncio.to_thread(self.writer.close)  # what is queued is written before the home is let go
        if self.history is not None:
            self.history.host_stopped()
            self.history = None
        self.secrets.close()
        self._lock.release()
        self._started = False

    # -- reads --------------------------------------------------------------------

    def _row_stores(self) -> list[RowStore[NodeRecord] | RowStore[Donation]]:  # the hosted nodes', the lent nodes' once read
        return [self.store, *([self.lending.donations] if self.lending else [])]

    def subscribe(self, listener: Callable[[HostEvent], None]) -> Callable[[], None]:  # every engine event (the tray, the SSE)
        return self.events.subscribe(listener)

    def list_nodes(self) -> list[NodeView]:  # this computer's (the fleet's: `fleet.all_nodes`)
        return self.views.list() if self.views is not None else []

    async def settled(self) -> None:  # once the records' writes asked so far are synced or failed
        for store in self._row_stores():
            await store.settled()

    def get_node(self, node_id: str) -> NodeView:
        if self.views is None:
            raise NoSuchThing(f"There is no node {node_id!r} on this host.")
        return self.views.get(node_id)

    def node_history(self, node_id: str) -> JSONObject:
        """The node's last 24 hours and 7 days: spans of state, restarts, uptime (host/core/ops/history.py)."""
        self.get_node(node_id)
        if self.history is None:
            raise NoSuchThing(f"There is no node {node_id!r} on this host.")
        return self.history.to_json(node_id)

    def log_tail(self, node_id: str, lines: int = 200) -> list[str]:
        self.get_node(node_id)
        return self._running().driver.log_tail(node_id, lines, max_bytes=256 * 1024)

    # -- actions ----------------------------------------------------------------------

    async def add_node(self, name: str | None = None) -> NodeView:
        p = self._running()
        return p.views.of(await p.service.add(name))

    async def join_node(self, invitation: str, name: str | None = None) -> NodeView:
        p = self._running()
        return p.views.of(await p.service.join(invitation, name))

    async def retry_node(self, node_id: str) -> NodeView:
        p = self._running()
        return p.views.of(await p.service.retry(node_id))

    async def pause_node(self, node_id: str, *, for_ms: int | None = None, until: datetime | None = None) -> NodeView:
        p = self._running()
        return p.views.of(await p.service.pause(node_id, for_ms=for_ms, until=until))

    async def resume_node(self, node_id: str) -> NodeView:
        p = self._running()
        self.host_holds.resumed(node_id)  # a person's word: over Pause all and the conditions, until they change
        return p.views.of(await p.service.resume(node_id))

    # -- every node at once -------------------------------------------------------------

    def pause_state(self) -> JSONObject:
        """Pause all as the front ends show it: {"paused": false}, or since, until, left_ms and reason."""
        return self.host_holds.state_json()

    async def pause_all(self, *, for_ms: int | None = None, until: datetime | None = None) -> JSONObject:
        """Hold every node (Pause all) for `for_ms`, until `until`, or until `resume_all`; kept across a restart; every child stopped."""
        p = self._running()
        self.host_holds.pause_all(for_ms, until)
        await p.supervisor.reconcile()
        return self.pause_state()

    def conditions_report(self) -> dict[str, object]:
        """Each run condition: what it sees, where from, what it does; the verdict (`cadre-desktop conditions`)."""
        judge = self.judge or Judge(self.settings, self.clock, [])
        return {**judge.report(), "pause": self.pause_state(), "resumed": self.host_holds.resumed_words()}

    async def resume_all(self) -> JSONObject:
        """End Pause all; every node the host held runs again (the conditions too, until their next change)."""
        p = self._running()
        self.host_holds.resume_all()
        await p.supervisor.reconcile()
        return self.pause_state()

    async def restart_node(self, node_id: str) -> NodeView:
        p = self._running()
        await p.service.restart(node_id)  # only a restart asked `only_if_running` may come back empty
        return p.views.get(node_id)

    async def regenerate_node(self, node_id: str) -> NodeView:
        p = self._running()
        return p.views.of(await p.service.regenerate(node_id))

    async def invite_node(self, node_id: str, name: str | None = None) -> NodeView:
        """A new node that joins the cadre of `node_id` (host/core/ops/invite.py)."""
        from cadre_desktop.host.core.ops.invite import Inviter

        p = self._running()
        inviter = Inviter(store=self.store, starter=p.supervisor.starter, driver=p.driver, service=p.service,
                          probe=p.probe, bind_host=self.settings.bind_host)
        inviting, invitation = await inviter.invitation_from(node_id)
        view = await self.join_node(invitation, name)
        log.info("node %s invited node %s into cadre %r", node_id, view.id, inviting.cadre)
        return view

    async def set_node_caps(self, node_id: str, change: dict[str, object]) -> NodeView:
        """A node's own caps and `always_run` (`PATCH /api/nodes/{id}`, `node set`): checked whole,
        then written at once; the driver takes them at the node's next start (a Restart)."""
        checked = check_caps_change(change)
        if self.lifecycle.apply(node_id, Change.CAPS, lambda r: r.replace(**checked)) is None:
            self.get_node(node_id)  # no such node: its error
            raise InvalidState(f"Node {node_id} is being created; set its caps once it has started.")
        return self.get_node(node_id)

    async def remove_node(self, node_id: str) -> bool:
        return await self._running().service.remove(node_id)

    async def reclaim_orphan(self, node_id: str) -> list[int]:
        """Stop the orphaned children of an id no record names; the pids stopped."""
        return await self._running().service.reclaim_orphan(node_id)
