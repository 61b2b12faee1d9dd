"""The fleet's shared state composed for one host: the store, the mover and their link calls.

`FleetRun.wire` is the one place that knows the host's parts by name: the host calls it once
its supervision and its fleet exist, then `start` (a task: the host's start never waits on
etcd) and `stop` at quit. Every collaborator below is handed what it needs as a callable.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cadre_desktop.errors import NoSuchThing
from cadre_desktop.host.core.events import EventBus, EventKind
from cadre_desktop.host.core.ops.service import NodeService
from cadre_desktop.host.core.ops.views import NodeView, NodeViews
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.core.supervision.observe import Observer
from cadre_desktop.host.core.supervision.starts import Starter
from cadre_desktop.host.core.vault.secrets import SecretKind, SecretStore
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleet.fleet import Fleet
from cadre_desktop.host.fleetrun.failover import Failover, Hooks
from cadre_desktop.host.fleetrun.moves import LocalSide, Mover
from cadre_desktop.host.fleetrun.replicas import Replicas
from cadre_desktop.host.fleetrun.run_api import RunApi
from cadre_desktop.host.fleetrun.store import FleetStore
from cadre_desktop.host.local.system.seam import for_this_os
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings
from cadre_desktop.text import one_line


class FleetRun:
    def __init__(self, store: FleetStore, mover: Mover, fleet: Fleet, failover: Failover) -> None:
        self.store, self.mover, self.fleet, self.failover = store, mover, fleet, failover

    @classmethod
    def wire(cls, *, fleet: Fleet, settings: Callable[[], Settings], paths: Paths, secrets: SecretStore,
             service: NodeService, views: NodeViews, get_node: Callable[[str], NodeView],
             pause: Callable[[str], Awaitable[object]], resume: Callable[[str], Awaitable[object]],
             advertise: Callable[[], str], restart: Callable[[str], Awaitable[object]],
             starter: Starter, observer: Observer, events: EventBus) -> FleetRun:
        async def ask(computer: Computer, method: str, path: str, body: Any, timeout_s: float) -> tuple[int, Any]:
            return await fleet.forward_within(computer, method, path, body, timeout_s)

        store = FleetStore(settings=settings, root=paths.etcd_dir, system=for_this_os, self_id=lambda: fleet.self_id,
                           computers=lambda: fleet.doc.computers, identity=fleet.load_identity, ask=ask,
                           advertise=advertise, unpaired_by_them=lambda: fleet.unpaired_by_them)

        async def secret(node_id: str) -> str | None:
            return await secrets.get(node_id, SecretKind.CLAIM)

        def record(node_id: str) -> NodeRecord | None:
            return service.store.get(node_id)
        async def moved_in(record: NodeRecord, secret: str, status: NodeStatus) -> NodeRecord:
            adopted = await service.adopt(record, secret, status)
            events.emit(EventKind.MOVED, record.id, "moved here from another computer of the fleet")
            return adopted
        local = LocalSide(view=get_node, record=record, secret=secret, pause=pause, resume=resume,
                          remove=service.remove, node_dir=paths.node_dir, adopt=moved_in, now=time.time)
        mover = Mover(me=lambda: fleet.self_id, computers=lambda: fleet.doc.computers, local=local, store=store, ask=ask)
        def failed_over(node_id: str, name: str, source: str, target: str, why: str) -> None:
            """A failover node was taken over here: one event, for the tray to tell once."""
            events.emit(EventKind.FAILED_OVER, node_id, one_line(f"{name} moved to {target}: {why}", 300))
        hooks = Hooks(records=service.store.list, restart=restart, moving=lambda node_id: node_id in mover._moving,
                      failed_over=failed_over)
        failover = Failover(settings=settings, me=lambda: fleet.self_id, computers=lambda: fleet.doc.computers,
                            store=store, local=dataclasses.replace(local, adopt=service.adopt), hooks=hooks,
                            replicas=Replicas(paths.data_dir / "replicas", secrets),
                            ask=ask)
        # Every start of a failover node carries its lease terms, and one with no deadline ahead waits.
        starter.extra_env, observer.lease_wait, mover.hold = failover.lease_env, failover.hold.start_wait, failover.hold

        def view_of(node_id: str) -> dict[str, Any]:
            shown = store.view_of(node_id)
            why = failover.stopped.get(node_id)
            if why is not None and shown.get("failover"):
                shown["fleet_note"] = why
            return shown
        views.shared = view_of
        fleet.run_api = RunApi(store, mover, failover)
        return cls(store, mover, fleet, failover)

    def start(self) -> None:
        self.store.start()
        self.failover.start()

    async def stop(self) -> None:
        """The failover part, then the store and its etcd member: the member stops even when the
        failover's stop fails (a host that died in its stop left its member running)."""
        try:
            await self.failover.stop()
        finally:
            await self.store.stop()

    async def move(self, node_id: str, to: str) -> dict[str, Any]:
        """`node move ID --to COMPUTER`: here, or on the computer that hosts the node (over the link)."""
        if self.mover.local.record(node_id) is not None:
            return await self.mover.move(node_id, to)
        computer = await self.fleet.host_of(node_id)
        if computer is None:
            raise NoSuchThing(f"No computer of the fleet hosts a node {node_id!r}.")
        status, doc = await self.fleet.forward_within(computer, "POST", "/fleet/run/move/out",
                                                      {"node": node_id, "to": to}, 60.0)
        if status != 200:
            error = doc.get("error", {}) if isinstance(doc, dict) else {}
            from cadre_desktop.errors import InvalidState

            raise InvalidState(f"{computer.name}: {str(error.get('message', f'answered {status}'))[:300]}")
        return doc if isinstance(doc, dict) else {}
