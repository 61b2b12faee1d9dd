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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cadre_desktop.errors import Bug, message_of
from cadre_desktop.host.core.driver import InstanceInfo
from cadre_desktop.host.core.records.records import SUPERVISED
from cadre_desktop.host.drivers import driver_config
from cadre_desktop.settings import Settings

if TYPE_CHECKING:
    from cadre_desktop.host.host import Host

log = logging.getLogger(__name__)

#: Keys a running host cannot take without starting again.
AT_START_ONLY = ("bind_host", "probe_interval_ms", "driver", "lend_port")


@dataclass
class Applied:
    #: Nodes restarted to pick the change up.
    restarted: list[str] = field(default_factory=list)
    #: Nodes whose restart failed (they are down; the supervisor brings them back).
    failed: dict[str, str] = field(default_factory=dict)
    #: Changed keys that take effect at the next start.
    at_next_start: list[str] = field(default_factory=list)


def _running_supervised(host: Host) -> list[tuple[Any, InstanceInfo]]:
    """Every running hosted and lent node, with its child."""
    out = []
    for record in host.store.list():
        handle = host.driver.get(record.handle) if host.driver else None
        if record.status in SUPERVISED and handle is not None and handle.alive:
            out.append((record, handle))
    lending = getattr(host, "lending", None)
    if lending is not None and host.driver is not None:
        out += lending.running()
    return out


def _to_restart(host: Host, old: Settings, new: Settings) -> list[str]:
    low, high = new.port_range
    ids = []
    for record, handle in _running_supervised(host):
        ports = tuple(p for p in getattr(handle, "ports", (record.api_port, record.p2p_port)) if p is not None)
        outside = any(not (low <= p <= high) for p in ports)
        if new.node_command != old.node_command or (new.port_range != old.port_range and outside):
            ids.append(record.id)
    return ids


def _swap(host: Host, new: Settings) -> None:
    if host.driver is not None:
        host.driver.reconfigure(driver_config(new))
    supervisor = host.supervisor
    if supervisor is not None:
        supervisor.use_settings(new)
    lending = getattr(host, "lending", None)
    if lending is not None:
        lending.use_settings(new)
    if host.judge is not None:
        host.judge.use_settings(new)


async def apply_settings(host: Host, new: Settings) -> Applied:
    """Take `new` as the settings from now on; restart, one at a time, the nodes that need it."""
    old = host.settings
    applied = Applied(at_next_start=[k for k in AT_START_ONLY if getattr(old, k) != getattr(new, k)])
    restart = _to_restart(host, old, new)
    host.settings = new
    _swap(host, new)
    if new.advertise_host != old.advertise_host:
        host.refresh()  # the watcher re-reads the address and restarts who advertises the old one
    for node_id in restart:
        try:
            if host.service is None:
                raise Bug("settings were applied to a host that has not started")
            await host.service.restart(node_id)  # the one Restart: hosted and lent nodes alike
            applied.restarted.append(node_id)
        except Exception as exc:  # removed meanwhile, or it failed to start: say so, go on
            applied.failed[node_id] = message_of(exc)
            log.warning("node %s: restart for the new settings failed: %s", node_id, applied.failed[node_id])
    if applied.restarted:
        log.info("settings applied; restarted %d node(s) for them", len(applied.restarted))
    return applied
