"""The Host: the composition root of the engine.

It wires settings, store, secrets, orchestrator, service, supervisor, probe
and the control API, owns their tasks, and is what the tray, the headless
runner and the control API call. Nothing here imports Qt.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from cadre_desktop.errors import CadreError, NotFound
from cadre_desktop.host.address import claim_url, detect_lan_address
from cadre_desktop.host.netwatch import AddressWatcher
from cadre_desktop.host import live_settings
from cadre_desktop.host.clock import Clock, iso
from cadre_desktop.host.events import EventBus, EventKind, HostEvent
from cadre_desktop.host.lock import HostLock
from cadre_desktop.host.keyring_gate import KeyringGate
from cadre_desktop.host.lifecycle import Lifecycle
from cadre_desktop.host.orchestrator import Orchestrator
from cadre_desktop.host.ports import PortAllocator
from cadre_desktop.host.preflight import check_bind_host, prepare_home
from cadre_desktop.host.probe import HttpStatusFetcher, Probe, loopback_for
from cadre_desktop.host.records import SUPERVISED, NodeRecord, NodeStatus
from cadre_desktop.host.secrets import SecretKind, SecretStore, move_legacy_entries
from cadre_desktop.host.service import NodeService
from cadre_desktop.host.store import KEYRING_LAYOUT, RecordStore
from cadre_desktop.host.supervisor import Supervisor, secret_kind
from cadre_desktop.host.views import NodeView
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings, load_settings

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
        self.gate: KeyringGate | None = None
        self._lock = HostLock(paths.lock_file)
        self._serve_control_api = serve_control_api
        self._address_source = address_source or self._configured_address
        self._advertise = self._address_source()
        self.netwatch: AddressWatcher | None = None
        self.orchestrator: Orchestrator | None = None
        self.service: NodeService | None = None
        self.supervisor: Supervisor | None = None
        self.probe: Probe | None = None
        self.control = None
        #: Grants, lent nodes and the lend API (host/lend_host.py).
        self.lending = None
        self._started = False

    # -- life ---------------------------------------------------------------------

    @property
    def advertise_host(self) -> str:
        return self._advertise

    def _configured_address(self) -> str:
        """The `advertise_host` setting as it is in settings.json now, else the LAN address.

        Re-reading the file lets a person change the advertised address without
        restarting the host; a file broken meanwhile keeps the address we have.
        """
        try:
            configured = load_settings(self.paths.settings_file).advertise_host
        except Exception:
            if hasattr(self, "_advertise"):
                return self._advertise
            configured = self.settings.advertise_host
        return configured or detect_lan_address()

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
        s = self.settings
        self.paths.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store.load()
        from cadre_desktop.host.lend_host import Lending

        self.lending = Lending(self)
        self.lending.load()
        if self._serve_control_api:
            from cadre_desktop.host.control import check_control_file

            # A control.json we cannot have written is refused, like every file we keep.
            check_control_file(self.paths.control_file)
        check_bind_host(s.bind_host, str(self.paths.settings_file))
        ports = PortAllocator(*s.port_range, bind_host=s.bind_host)
        self.orchestrator = Orchestrator(
            paths=self.paths,
            node_command=s.node_command,
            ports=ports,
            bind_host=s.bind_host,
            advertise_host=lambda: self._advertise,
            stop_timeout_s=s.stop_timeout_ms / 1000,
            warm_standby=s.uses_warm_standby(),
        )
        report = await self.orchestrator.init()
        # Only once every file was read and found good: an upgrade writes the records.
        self._bind_keyring()
        if report.attached:
            log.info("re-attached to %d running node(s)", len(report.attached))
        self.gate = KeyringGate(self.secrets, sleep=self.clock.sleep)
        interval = s.probe_interval_ms / 1000
        self.probe = Probe(
            lifecycle=self.lifecycle, driver=self.orchestrator, clock=self.clock,
            interval_s=interval,
            fetch=HttpStatusFetcher(loopback_for(s.bind_host), timeout_s=min(2.0, max(0.2, interval)),
                                    fresh_after_s=min(2.5, interval / 2)),
            on_unresponsive=lambda _node_id: self.supervisor and self.supervisor.kick("unresponsive"),
        )
        self.supervisor = Supervisor(
            lifecycle=self.lifecycle, driver=self.orchestrator, gate=self.gate, settings=s, clock=self.clock,
            probe=self.probe, on_sweep=self._sweep_housekeeping,
        )
        self.service = NodeService(
            lifecycle=self.lifecycle, driver=self.orchestrator, gate=self.gate,
            supervisor=self.supervisor, clock=self.clock,
        )
        await self._prefetch_secrets()
        self._keyring_move = asyncio.ensure_future(self._move_keyring_entries())
        await self.service.reap_stuck()
        self.lending.attach()  # lent nodes: the same supervisor, probe and gate, from the first pass
        self.supervisor.start(stopped_cleanly=report.stopped_cleanly)
        await self.lending.start()
        self.probe.start()
        # A new child is watched until it answers, rather than waiting out the interval.
        self.events.subscribe(lambda event: self.probe.watch_node(event.node_id) if self.probe and event.node_id else None)
        self.netwatch = AddressWatcher(
            source=self._address_source, clock=self.clock,
            on_change=self._address_changed, on_wake=self._woke,
        )
        self.netwatch.start()
        if self._serve_control_api:
            from cadre_desktop.host.control import ControlServer

            self.control = ControlServer(self, self.paths.control_file)
            await self.control.start()
        self._started = True
        log.info("host started for %s (%d node(s))", self.paths.data_dir, len(self.store.list()))

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
        self._prefetch_task = task
        try:
            await asyncio.wait_for(asyncio.shield(task), wait_s)
        except asyncio.TimeoutError:
            log.warning("the keyring has not answered yet; nodes that need a secret wait for it")
        except Exception as exc:
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
        if self.netwatch:
            self.netwatch.check_soon()

    def _woke(self, slept_s: float) -> None:
        if self.probe:
            self.probe.probe_soon()
        self.events.emit(EventKind.WOKE, "", f"{slept_s:.0f}")

    async def _address_changed(self, old: str, new: str) -> None:
        """Restart, one at a time, each running node that still advertises the old address."""
        self._advertise = new
        self.events.emit(EventKind.ADDRESS, "", new)
        for record in self.store.list():
            self.events.emit(EventKind.CHANGED, record.id)  # its claim URL changed
        for record in self.store.list():
            handle = self.orchestrator.get(record.handle)
            if record.status not in SUPERVISED or handle is None or not handle.alive:
                continue
            if handle.advertise_host == new:
                continue
            try:
                await self.service.restart(record.id, only_if_running=True)
            except Exception as exc:
                # The node is down now; the exit its stop raised hands it to the crash path.
                log.error("restarting node %s for the new address failed: %s", record.id, exc)
        lending = getattr(self, "lending", None)
        if lending is not None and lending.service is not None:
            await lending.address_changed(new)

    async def _teardown(self, *, stop_nodes: bool) -> None:
        if self.netwatch is not None:
            await self.netwatch.stop()
        if self.control is not None:
            await self.control.stop()
            self.control = None
        if self.lending is not None:
            await self.lending.stop()
        if self.probe is not None:
            await self.probe.stop()
        if self.supervisor is not None:
            # First, so the exits the stops below raise trigger no respawn.
            await self.supervisor.stop()
        if self.gate is not None:
            await self.gate.close()
        for name in ("_prefetch_task", "_keyring_move"):
            task = getattr(self, name, None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.orchestrator is not None:
            if stop_nodes:
                await self.orchestrator.stop_all()
            self.orchestrator.close()
        self.secrets.close()
        self._lock.release()
        self._started = False

    # -- reads --------------------------------------------------------------------

    def subscribe(self, listener: Callable[[HostEvent], None]) -> Callable[[], None]:
        return self.events.subscribe(listener)

    def list_nodes(self) -> list[NodeView]:
        return [self._view(r) for r in self.store.list()]

    def get_node(self, node_id: str) -> NodeView:
        record = self.store.get(node_id)
        if record is None:
            raise NotFound(f"There is no node {node_id!r} on this host.")
        return self._view(record)

    def log_tail(self, node_id: str, lines: int = 200) -> list[str]:
        self.get_node(node_id)
        return self.orchestrator.log_tail(node_id, lines, max_bytes=256 * 1024)

    def _view(self, record: NodeRecord) -> NodeView:
        handle = self.orchestrator.get(record.handle) if self.orchestrator else None
        unsaved = None if handle and handle.alive else self._unsaved_child(record)
        handle = unsaved or handle
        running = bool(handle and handle.alive)
        next_retry = None
        if record.status in SUPERVISED and not running and self.supervisor:
            when = self.supervisor.next_attempt_at(record)
            if when is not None and when > self.clock.now():
                next_retry = iso(when)
        url = None
        if record.status is NodeStatus.UNCLAIMED and record.api_port and self.gate:
            secret = self.gate.cached(record.id, SecretKind.CLAIM)
            if secret:
                url = claim_url(self._advertise, record.api_port, record.id, secret)
        advertised = handle.advertise_host if running and handle.advertise_host else self._advertise
        return NodeView(
            id=record.id,
            name=record.name,
            status=record.status.value,
            mode=record.mode.value,
            running=running,
            ready=bool(running and self.probe and self.probe.is_ready(handle.id)),
            pid=handle.pid if running else None,
            api_port=handle.api_port if unsaved else record.api_port,
            p2p_port=handle.p2p_port if unsaved else record.p2p_port,
            peer_id=record.peer_id,
            cadre=record.cadre,
            attempts=record.attempts,
            next_retry_at=next_retry,
            last_error=self._save_problem(record, unsaved) or record.error,
            claim_url=url,
            advertise_host=advertised,
            created_at=record.created_at,
            updated_at=record.updated_at,
            started_at=handle.started_at if running else None,
            log_path=str(self.paths.node_log(record.id)),
            last_exit=self._last_exit(record, running),
            exit_code=None if running or not self.supervisor else self.supervisor.exit_code(record.id),
            waiting_for="keyring" if self.supervisor and self.supervisor.waiting_for_keyring(record.id) else None,
            last_decision=self.supervisor.last_decisions.get(record.id) if self.supervisor else None,
        )

    def _unsaved_child(self, record: NodeRecord):
        """A live child of the node that its record does not name: the write after its start failed."""
        if not self.orchestrator or record.status not in SUPERVISED:
            return None
        alive = [h for h in self.orchestrator.handles_for(record.id) if h.alive]
        return alive[-1] if alive else None

    def _save_problem(self, record: NodeRecord, unsaved) -> str | None:
        """The live truth came from memory, not the records: say why it could not be saved."""
        if unsaved is None:
            return None
        why = self.store.save_error or (self.orchestrator.save_error if self.orchestrator else None)
        note = f"running, but not saved yet: {why}" if why else "running, but not saved yet"
        return f"{record.error}; {note}" if record.error else note

    def _last_exit(self, record: NodeRecord, running: bool) -> str | None:
        """What ended the node's last start, while it matters: down, or starting again after a failure."""
        seen = self.supervisor.last_exit(record.id) if self.supervisor else None
        if seen:
            return seen
        mark = record.start
        if mark is not None and mark.last_exit and (not running or not mark.answered):
            return mark.last_exit
        return None

    def keyring_condition(self):
        """Why the keyring cannot be used now (code, message), or None when it works."""
        return self.gate.condition if self.gate else None

    # -- actions ----------------------------------------------------------------------

    async def add_node(self, name: str | None = None) -> NodeView:
        return self._view(await self.service.add(name))

    async def join_node(self, invitation: str, name: str | None = None) -> NodeView:
        return self._view(await self.service.join(invitation, name))

    async def retry_node(self, node_id: str) -> NodeView:
        return self._view(await self.service.retry(node_id))

    async def restart_node(self, node_id: str) -> NodeView:
        return self._view(await self.service.restart(node_id))

    async def regenerate_node(self, node_id: str) -> NodeView:
        return self._view(await self.service.regenerate(node_id))

    async def invite_node(self, node_id: str, name: str | None = None) -> NodeView:
        """A new node that joins the cadre of `node_id` (host/invite.py)."""
        from cadre_desktop.host.invite import invite_another

        return await invite_another(self, node_id, name)

    def driver_running(self, handle_id: str | None) -> bool:
        return bool(self.orchestrator and self.orchestrator.is_running(handle_id))

    def node_address(self) -> str:
        """Where this machine reaches the nodes it runs."""
        return loopback_for(self.settings.bind_host)

    async def remove_node(self, node_id: str) -> bool:
        return await self.service.remove(node_id)
