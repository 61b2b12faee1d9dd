"""Which driver runs the nodes: one factory, chosen by the `driver` setting.

The engine speaks to compute only through `core.driver.NodeDriver`; this is the one
place that knows the drivers there are and builds the one the settings name.
`docs/drivers.md` maps the seam onto others (a systemd user unit, a Kubernetes pod)
that are not built until a machine to test them exists.
"""

from __future__ import annotations

from collections.abc import Callable

from cadre_desktop.errors import InputError
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.core.driver import DriverConfig, NodeCaps, NodeDriver
from cadre_desktop.paths import Paths
from cadre_desktop.settings import DRIVERS, Settings


def driver_config(settings: Settings) -> DriverConfig:
    """What a driver takes from the settings, at start and live."""
    return DriverConfig(node_command=tuple(settings.node_command), port_range=settings.port_range,
                        stop_timeout_s=settings.stop_timeout_ms / 1000, warm_standby=settings.uses_warm_standby())


def make_driver(settings: Settings, paths: Paths, advertise_host: Callable[[], str], *,
                caps_for: Callable[[str], NodeCaps] | None = None, home_id: str = "",
                writer: GroupWriter | None = None) -> NodeDriver:
    """The driver `settings.driver` names (settings.py has already refused any other name).

    `caps_for(node_id)` gives the caps of a node's next start (its record's, else the
    settings'); `home_id` names this home's cgroups or scopes, so two homes never share one;
    `writer`, the host's writer thread, writes the driver's files off the loop.
    """
    config = driver_config(settings)
    if settings.driver == "local":
        from cadre_desktop.host.local.limits import caps
        from cadre_desktop.host.local.orchestrator import Orchestrator
        from cadre_desktop.host.local.ports import PortAllocator
        from cadre_desktop.host.local.system import procs

        keeper = None
        if caps_for is not None:
            keeper = caps.CapsKeeper(caps.choose(procs.CURRENT, home_id or "home"), caps_for, platform=procs.CURRENT)
        return Orchestrator(
            paths=paths, node_command=list(config.node_command),
            ports=PortAllocator(*config.port_range, bind_host=settings.bind_host), bind_host=settings.bind_host,
            advertise_host=advertise_host, stop_timeout_s=config.stop_timeout_s, warm_standby=config.warm_standby,
            caps=keeper, writer=writer,
        )
    raise InputError(f"unknown driver {settings.driver!r}; known drivers: {', '.join(DRIVERS)}")
