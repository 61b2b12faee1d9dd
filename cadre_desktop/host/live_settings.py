"""Settings changed while the host runs (Preferences, or settings.json edited by hand).

`apply_settings` swaps in what can change live: the node command, the port
range, the advertised address, the stop grace, the supervision numbers, and the
switches only the UI reads (notifications, quitting). Nodes that must restart to
pick a change up are restarted one at a time, as a Restart does, so no budget
is spent: each running node, hosted or lent, for a new node command, each
running node whose ports fall outside a new range. A node the host gave up on
is left alone; its Retry starts the new command. A new advertised address goes
through the address watcher, which restarts the nodes that advertise the old
one. Lending's own numbers (`lend_max_nodes`, the provisioning and seed TTLs,
the lent nodes' supervision) apply from the next request or sweep. The keys in
AT_START_ONLY (`bind_host`, `lend_port`, ...) are read at start only: the
result names them. The nodes' default caps
(`node_cpu_percent`, `node_memory_mb`, `node_low_priority`) are read at each node's start: a
running node keeps its caps until it starts again (a Restart applies them now).

`LiveSettings` is made by the Host for each change, from the parts it uses
(the records, the driver, the Restart, the parts that retune, the lent nodes):
it never takes the Host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cadre_desktop.errors import Bug, message_of
from cadre_desktop.host.core.driver import InstanceInfo, NodeDriver
from cadre_desktop.host.core.records.records import SUPERVISED
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.host.drivers import driver_config
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)

#: Keys a running host cannot take without starting again.
AT_START_ONLY = ("bind_host", "probe_interval_ms", "driver", "lend_port")


class Retuned(Protocol):
    """A part that takes new settings while it runs (the supervisor, lending, the run conditions' judge)."""

    def use_settings(self, settings: Settings, /) -> None: ...


class Restarts(Protocol):
    """The node service's one Restart, for hosted and lent nodes alike."""

    async def restart(self, node_id: str, /) -> object: ...


class Row(Protocol):
    @property
    def id(self) -> str: ...


class LentNodes(Retuned, Protocol):
    """Lending, as new settings reach it: its running lent nodes, and its own numbers."""

    def running(self) -> Sequence[tuple[Row, InstanceInfo]]: ...


@dataclass
class Applied:
    #: Nodes restarted to pick the change up.
    restarted: list[str] = field(default_factory=list)
    #: Nodes whose restart failed (they are down; the supervisor brings them back).
    failed: dict[str, str] = field(default_factory=dict)
    #: Changed keys that take effect at the next start.
    at_next_start: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class LiveSettings:
    """New settings reaching a host's parts; those not made yet (before the host started) are None."""

    store: RecordStore
    driver: NodeDriver | None
    service: Restarts | None
    supervisor: Retuned | None
    lending: LentNodes | None
    judge: Retuned | None
    #: Look at the network now: the address watcher re-reads the advertised address.
    refresh: Callable[[], None]

    def _running(self) -> list[tuple[Row, InstanceInfo]]:
        """Every running hosted and lent node, with its child."""
        out: list[tuple[Row, InstanceInfo]] = []
        for record in self.store.list():
            handle = self.driver.get(record.handle) if self.driver else None
            if record.status in SUPERVISED and handle is not None and handle.alive:
                out.append((record, handle))
        if self.lending is not None and self.driver is not None:
            out += self.lending.running()
        return out

    def _to_restart(self, old: Settings, new: Settings) -> list[str]:
        low, high = new.port_range
        ids = []
        for record, handle in self._running():
            outside = any(not (low <= p <= high) for p in (handle.api_port, handle.p2p_port))
            if new.node_command != old.node_command or (new.port_range != old.port_range and outside):
                ids.append(record.id)
        return ids

    def _swap(self, new: Settings) -> None:
        if self.driver is not None:
            self.driver.reconfigure(driver_config(new))
        for part in (self.supervisor, self.lending, self.judge):
            if part is not None:
                part.use_settings(new)

    async def apply(self, old: Settings, new: Settings) -> Applied:
        """`new` replaced `old` as the host's settings: swap it in, restart, one at a time, the nodes that need it."""
        applied = Applied(at_next_start=[k for k in AT_START_ONLY if getattr(old, k) != getattr(new, k)])
        restart = self._to_restart(old, new)
        self._swap(new)
        if new.advertise_host != old.advertise_host:
            self.refresh()  # the watcher re-reads the address and restarts who advertises the old one
        for node_id in restart:
            try:
                if self.service is None:
                    raise Bug("settings were applied to a host that has not started")
                await self.service.restart(node_id)  # the one Restart: hosted and lent nodes alike
                applied.restarted.append(node_id)
            except Exception as exc:  # removed meanwhile, or it failed to start: say so, go on
                applied.failed[node_id] = message_of(exc)
                log.warning("node %s: restart for the new settings failed: %s", node_id, applied.failed[node_id])
        if applied.restarted:
            log.info("settings applied; restarted %d node(s) for them", len(applied.restarted))
        return applied
