"""The driver seam: where compute comes from.

The supervisor, the service and the probe never spawn or signal anything
themselves; they ask a *driver*. Three calls make a driver:

* ``start(node_id, attempt, secret_env, ...) -> handle``: run the node. The
  start is keyed by ``attempt`` (the node's start number): a driver that finds
  a live instance the same attempt already made returns it with
  ``adopted=True`` instead of starting a second one. This is what makes a host
  that died between starting a child and writing its record safe to restart.
* ``status(handle_id) -> DriverStatus``: what became of an instance.
* ``stop(handle_id)``: end it and whatever it left behind; a handle the driver
  cannot reach is a no-op.

Local processes (`host/orchestrator.py`) are the first driver. The rest of
the Protocol is what the engine needs around those three: exit notifications,
the instances of one node, logs, and the host-wide start and stop.
docs/drivers.md says how a second driver would plug in.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable, Mapping, Protocol, runtime_checkable


class DriverStatus(str, Enum):
    RUNNING = "running"
    #: Ended because it was asked to, or on its own with success.
    STOPPED = "stopped"
    #: Ended on its own with a failure (a non-zero code or a signal).
    FAILED = "failed"
    #: The driver knows this handle no more (forgotten, or its host went away).
    GONE = "gone"
    #: Not this driver's to judge (no handle, or someone else's).
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Exit:
    """What a driver reports when an instance ends."""

    handle_id: str
    node_id: str
    pid: int
    returncode: int | None
    #: True when the exit followed a stop the host asked for.
    requested: bool


class InstanceInfo(Protocol):
    """What the engine reads of one instance (the local driver's Handle has all of it)."""

    id: str
    node_id: str
    pid: int
    api_port: int
    p2p_port: int
    started_at: str
    advertise_host: str
    alive: bool
    returncode: int | None
    attempt: int
    adopted: bool


ExitListener = Callable[[Exit], None]


@runtime_checkable
class NodeDriver(Protocol):
    # -- the three calls ---------------------------------------------------------
    def start(
        self,
        node_id: str,
        attempt: int,
        secret_env: Mapping[str, str],
        *,
        want_ports: tuple[int, int] | None = None,
        avoid_ports: Iterable[int] = (),
    ) -> InstanceInfo:
        """Start the node (synchronously, so nothing runs between the decision and the start)."""
        ...

    def status(self, handle_id: str | None) -> DriverStatus: ...

    async def stop(self, handle_id: str | None) -> None: ...

    # -- around them -------------------------------------------------------------
    def subscribe(self, listener: ExitListener) -> Callable[[], None]:
        """Tell `listener` of every exit, once the instance's last output is in its log
        (a listener reads it to say why the node ended)."""
        ...

    def get(self, handle_id: str | None) -> InstanceInfo | None: ...

    def is_running(self, handle_id: str | None) -> bool: ...

    def handles_for(self, node_id: str) -> list: ...

    def list_nodes(self) -> list: ...

    async def stop_node(self, node_id: str) -> None: ...

    async def remove_node(self, node_id: str) -> None: ...

    def log_tail(self, node_id: str, lines: int = 20, max_bytes: int = 16384) -> list[str]: ...

    def trim_logs(self) -> None: ...


def status_of(info: InstanceInfo | None) -> DriverStatus:
    """The status of an instance as a driver that keeps handles in memory sees it."""
    if info is None:
        return DriverStatus.GONE
    if info.alive:
        return DriverStatus.RUNNING
    if getattr(info, "stop_requested", False) or info.returncode == 0:
        return DriverStatus.STOPPED
    return DriverStatus.FAILED
