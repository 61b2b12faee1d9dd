"""The driver seam: where compute comes from.

The supervisor, the service and the probe never spawn or signal anything
themselves; they ask a *driver*. Three calls make a driver:

* ``start(node_id, attempt, secret_env, ...) -> handle``: run the node. The
  start is keyed by ``attempt`` (the node's start number): a driver that finds
  a live instance the same attempt already made returns it with
  ``adopted=True`` instead of starting a second one. This is what makes a host
  that died between starting a child and writing its record safe to restart.
  It is awaited: what is slow about starting (fork/exec, a pod scheduled) must
  not hold the loop, so the caller re-reads its record after it. A driver runs
  one start of a node at a time, and its ``stop_node``, ``remove_node`` and
  ``stop_all`` wait for a start in flight and stop its child too; a start whose
  caller is cancelled, or whose driver is closed, leaves no instance behind.
* ``status(handle_id) -> DriverStatus``: what became of an instance.
* ``stop(handle_id)``: end it and whatever it left behind; a handle the driver
  cannot reach is a no-op.

Local processes (`host/local/orchestrator.py`) are the first driver. The rest of
the Protocol is everything else the engine calls on a driver, and nothing more:
exit notifications, the instances of one node, logs, the host-wide start
(``init``: re-attach to what outlived the last host), stop (``stop_all``) and
close, new settings while running (``reconfigure``), a failed write of its state
(``save_error``), and how it enforces a node's caps (``caps_enforcement``; the caps themselves reach it as the
``caps_for`` its factory is given, read at each start). `host/drivers.py` builds
the driver the `driver` setting names; the driver contract tests
(`tests/integration/test_driver_contract.py`) run against every driver.
docs/drivers.md says how a second driver would plug in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable


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
    #: What the driver knows ended it, in words ("stopped by its memory cap of 256 MB"), if anything.
    cause: str | None = None


@dataclass(frozen=True)
class NodeCaps:
    """What one node may use: CPU in percent of one core and memory in MB (None: no cap),
    and whether it runs at the OS's background priority. A driver takes them at a start."""

    cpu_percent: int | None = None
    memory_mb: int | None = None
    low_priority: bool = True


@dataclass(frozen=True)
class CapsEnforcement:
    """How a driver enforces a node's caps on this computer: every view says it."""

    #: True when every cap set is held by the OS (nothing set: nothing to enforce, True).
    enforced: bool
    #: In words: "cgroup v1 memory and cpu controllers", "priority only: memory cap not enforced here: …".
    how: str


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

    @property
    def forked(self) -> bool:
        """Started as a fork of a loaded node program (a fork server), not from scratch."""
        ...


ExitListener = Callable[[Exit], None]


@dataclass(frozen=True)
class DriverConfig:
    """What every driver takes from the settings, at its start and again while it runs: the
    node program, the ports its nodes may listen on, the stop grace. The engine only carries
    it from `host/drivers.py:driver_config` to `reconfigure`; a driver that needs more has its
    own kind of it (the local driver's `host/local/config.py:LocalConfig`)."""

    node_command: tuple[str, ...]
    port_range: tuple[int, int]
    #: How long a stopped instance has between its terminate and its kill.
    stop_timeout_s: float


@dataclass(frozen=True)
class InitReport:
    """What a driver found when it started: the instances of the last host still running."""

    attached: Sequence[InstanceInfo] = field(default_factory=list)
    #: Nodes the last host stopped on a clean quit: starting them again is no failed attempt.
    stopped_cleanly: frozenset[str] = frozenset()


@runtime_checkable
class NodeDriver(Protocol):
    # -- the three calls ---------------------------------------------------------
    async def start(
        self,
        node_id: str,
        attempt: int,
        secret_env: Mapping[str, str],
        *,
        want_ports: tuple[int, int] | None = None,
        avoid_ports: Iterable[int] = (),
    ) -> InstanceInfo:
        """Start the node; the loop goes on while it comes up (the caller re-reads its record after)."""
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

    def handles_for(self, node_id: str) -> Sequence[InstanceInfo]: ...

    def list_nodes(self) -> Sequence[InstanceInfo]: ...

    async def stop_node(self, node_id: str) -> None: ...

    async def remove_node(self, node_id: str) -> None: ...

    def log_tail(self, node_id: str, lines: int = 20, max_bytes: int = 16384) -> list[str]: ...

    def trim_logs(self) -> None: ...

    # -- the host's start, stop and settings ------------------------------------

    async def init(self) -> InitReport:
        """Read what the last host left (re-attach to its live instances); once, before any start."""
        ...

    async def stop_all(self, leave: frozenset[str] = frozenset()) -> None:
        """Stop every instance (a Quit that stops the nodes), noting they were stopped on purpose;
        those of the nodes in `leave` (orphans, not this host's to stop) keep running."""
        ...

    def close(self) -> None:
        """Stop watching; instances keep running (a later host re-attaches)."""
        ...

    def reconfigure(self, config: DriverConfig) -> None:
        """Take new settings for the next starts (the node program, the port range, the stop grace)."""
        ...

    def caps_enforcement(self, caps: NodeCaps, node_id: str | None = None) -> CapsEnforcement:
        """How this driver holds a node to `caps` on this computer (what the views say); for
        `node_id`, as the OS holds that node's child (a group that could not be made: not enforced)."""
        ...

    @property
    def save_error(self) -> str | None:
        """Why the driver's last write of its own state failed (None: it did not); the views say it."""
        ...


def status_of(info: InstanceInfo | None) -> DriverStatus:
    """The status of an instance as a driver that keeps handles in memory sees it."""
    if info is None:
        return DriverStatus.GONE
    if info.alive:
        return DriverStatus.RUNNING
    if getattr(info, "stop_requested", False) or info.returncode == 0:
        return DriverStatus.STOPPED
    return DriverStatus.FAILED
