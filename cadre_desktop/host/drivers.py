"""Which driver runs the nodes: one factory, chosen by the `driver` setting.

The engine speaks to compute only through `core.driver.NodeDriver`; this is the one
place that knows the drivers there are and builds the one the settings name (with its
own kind of configuration, `driver_config`), and the one place `cli/doctor.py` asks
what the driver would do on this computer (`free_port`, `trial_start`, `caps_words`).
The drivers: `local` (child processes, `host/local/`) and `systemd` (transient units of
the person's user manager, `host/systemd/`); `docs/drivers.md` maps the seam onto a
Kubernetes pod too, not built until a machine to test it exists.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

from cadre_desktop.errors import InputError, SpawnError
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.core.driver import DriverConfig, NodeCaps, NodeDriver
from cadre_desktop.paths import Paths
from cadre_desktop.settings import DRIVERS, Settings


def driver_config(settings: Settings) -> DriverConfig:
    """What the settings' driver takes from them, at start and live."""
    from cadre_desktop.host.local.config import LocalConfig

    if settings.driver == "systemd":  # a unit starts cold: no warm standby, no fork server
        return DriverConfig(node_command=tuple(settings.node_command), port_range=settings.port_range,
                            stop_timeout_s=settings.stop_timeout_ms / 1000)
    return LocalConfig(node_command=tuple(settings.node_command), port_range=settings.port_range,
                       stop_timeout_s=settings.stop_timeout_ms / 1000, warm_standby=settings.uses_warm_standby())


def make_driver(settings: Settings, paths: Paths, advertise_host: Callable[[], str], *,
                caps_for: Callable[[str], NodeCaps] | None = None, home_id: str = "",
                writer: GroupWriter | None = None) -> NodeDriver:
    """The driver `settings.driver` names (settings.py has already refused any other name).

    `caps_for(node_id)` gives the caps of a node's next start (its record's, else the
    settings'); `home_id` names this home's cgroups or scopes, so two homes never share one;
    `writer`, the host's writer thread, writes the driver's files off the loop. The local
    driver's OS seam is chosen here, once, for this computer.
    """
    if settings.driver == "local":
        from cadre_desktop.host.local.limits import caps
        from cadre_desktop.host.local.orchestrator import Orchestrator
        from cadre_desktop.host.local.ports import PortAllocator
        from cadre_desktop.host.local.system.seam import for_this_os

        config, system = driver_config(settings), for_this_os()
        keeper = None
        if caps_for is not None:
            keeper = caps.CapsKeeper(caps.choose(system, home_id or "home"), caps_for, system=system)
        return Orchestrator(
            paths=paths, node_command=list(config.node_command),
            ports=PortAllocator(*config.port_range, bind_host=settings.bind_host), bind_host=settings.bind_host,
            advertise_host=advertise_host, stop_timeout_s=config.stop_timeout_s,
            warm_standby=settings.uses_warm_standby(), caps=keeper, writer=writer, system=system,
        )
    if settings.driver == "systemd":
        return make_systemd_driver(settings, paths, advertise_host, caps_for=caps_for, home_id=home_id)
    raise InputError(f"unknown driver {settings.driver!r}; known drivers: {', '.join(DRIVERS)}")


def make_systemd_driver(settings: Settings, paths: Paths, advertise_host: Callable[[], str], *,
                        caps_for: Callable[[str], NodeCaps] | None = None, home_id: str = "",
                        address: str | None = None) -> NodeDriver:
    """The systemd driver on the user manager at `address` (else the one of this session), with the
    local driver's port allocator and node logs handed to it (it imports neither)."""
    from cadre_desktop.host.local.nodelogs import NodeLogs
    from cadre_desktop.host.local.ports import PortAllocator
    from cadre_desktop.host.systemd.bus import UserBus
    from cadre_desktop.host.systemd.checks import manager_address, manager_words
    from cadre_desktop.host.systemd.driver import SystemdDriver

    address = address or manager_address()
    if address is None:
        raise SpawnError(manager_words(None)[1])
    config = driver_config(settings)
    return SystemdDriver(
        paths=paths, bus=UserBus(address), home_id=home_id or "home", node_command=list(config.node_command),
        ports=PortAllocator(*config.port_range, bind_host=settings.bind_host), logs=NodeLogs(paths),
        bind_host=settings.bind_host, advertise_host=advertise_host, stop_timeout_s=config.stop_timeout_s,
        caps_for=caps_for,
    )


# -- what doctor asks -----------------------------------------------------------------------

def free_port(host: str, port: int) -> bool:
    """Whether a node could listen on `port` of `host` now (doctor's check of the port range)."""
    from cadre_desktop.host.local.ports import port_is_free

    return port_is_free(host, port)


class TrialStart:
    """One start of the node program as the driver would make it (the same environment
    builder, a group of its own), stopped as the driver would stop it: doctor's trial."""

    def __init__(self, command: list[str], work: Path, ports: tuple[int, int], log: IO[bytes]) -> None:
        from cadre_desktop.host.local import launch
        from cadre_desktop.host.local.system.seam import for_this_os

        #: The trial node's id: its /status names it (node contract), so an answer on its port
        #: from any other program is told apart.
        self.node_id = f"doctor-{secrets.token_hex(4)}"
        env = launch.node_env(
            os.environ, node_id=self.node_id, work=work, bind_host="127.0.0.1",
            ports=ports, advertise_host="127.0.0.1", attempt=0,
            secret_env={"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)},
        )
        self.system = for_this_os()
        #: OSError: the program could not be started.
        self.child: subprocess.Popen[bytes] = self.system.spawn(command, env=env, cwd=work, stdin=subprocess.DEVNULL,
                                                                stdout=log, stderr=subprocess.STDOUT)

    def end(self, grace_s: float = 5.0) -> int | None:
        """Terminate, wait up to `grace_s`, kill: its return code (None if it would not go)."""
        return self.system.end_child(self.child, grace_s)


def caps_words(home_id: str = "doctor", driver: str = "local") -> dict[str, str | bool]:
    """How this computer holds a node to its caps: "how" in words, and whether "enforced"."""
    if driver == "systemd":
        from cadre_desktop.host.systemd.units import caps_words as unit_words

        return {"how": unit_words(NodeCaps(cpu_percent=1, memory_mb=1, low_priority=True)), "enforced": True}
    from cadre_desktop.host.local.limits import caps
    from cadre_desktop.host.local.system.seam import for_this_os

    return caps.describe(caps.choose(for_this_os(), home_id))


def driver_checks(settings: Settings, address: str | None = None, user: str | None = None) -> list[tuple[str, bool | None, str]]:
    """What doctor says of the driver: (check, fine (None: only for information), words)."""
    if settings.driver != "systemd":
        how = "a warm standby ready for each start" if settings.uses_warm_standby() else "started cold"
        return [("driver", True, f"local: each node a child process of the host ({how})")]
    from cadre_desktop.host.systemd.checks import linger_words, lingering, manager_address, manager_words

    fine, words = manager_words(address or manager_address())
    return [("driver", fine, f"systemd: {words}"), ("lingering", None, linger_words(lingering(user)))]
