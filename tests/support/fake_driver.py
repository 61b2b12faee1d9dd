"""A driver without processes (host.driver.NodeDriver): children live and die on command.

`FakeMachine` is what outlives one driver, as the OS does for the local one: the
instances still running and the nodes stopped on a clean quit. Two drivers given
the same machine behave like two hosts in turn on one home: a closed driver's live
instances are re-attached by the next one's `init`. It passes the driver contract
(tests/integration/test_driver_contract.py) beside the local driver.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from cadre_desktop.errors import SpawnError
from cadre_desktop.host.core.driver import CapsEnforcement, DriverConfig, DriverStatus, Exit, ExitListener, InitReport, NodeCaps, status_of

SECRET_VARS = ("CADRE_CLAIM_SECRET", "CADRE_INVITATION")


@dataclass
class FakeHandle:
    id: str
    node_id: str
    pid: int
    api_port: int
    p2p_port: int
    alive: bool = True
    returncode: int | None = None
    started_at: str = "2026-01-01T00:00:00Z"
    advertise_host: str = ""
    attempt: int = 0
    adopted: bool = False
    #: Forked from a loaded node program (the local driver's fork server): a start that costs little.
    forked: bool = False
    stop_requested: bool = False
    #: The node program this instance runs (the driver's `node_command` at its start).
    command: tuple[str, ...] = ()

    @property
    def ports(self):
        return (self.api_port, self.p2p_port)


@dataclass
class FakeMachine:
    """What outlives a fake driver: every instance started on it, and the clean-quit list."""

    instances: dict[str, FakeHandle] = field(default_factory=dict)
    stopped_cleanly: set[str] = field(default_factory=set)
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))


FAKE_COMMAND = ("fake-node",)


class FakeOrchestrator:
    """A driver (host.driver.NodeDriver) with no processes: children live and die on command."""

    def __init__(self, machine: FakeMachine | None = None) -> None:
        self.machine = machine or FakeMachine()
        self.handles: dict[str, FakeHandle] = {}
        self.listeners: list[ExitListener] = []
        self.spawned: list[tuple[str, dict]] = []
        self.envs: list[tuple[str, dict]] = []
        self.stopped: list[str] = []
        self.removed: list[str] = []
        self.spawn_error: Exception | None = None
        #: Every start a fork of a loaded program (`FakeHandle.forked`).
        self.fork_starts = False
        #: Per node, the log lines log_tail returns.
        self.logs: dict[str, list[str]] = {}
        #: Per node, why the OS does not hold its child to its caps (`caps_enforcement` says it).
        self.unheld: dict[str, str] = {}
        #: Called at every stop with the handle id (to observe ordering).
        self.on_stop = None
        #: What `reconfigure` was last given; whether `stop_all` and `close` were called.
        self.config: DriverConfig | None = None
        #: Why the last write of the driver's state failed (the views say it); None: it did not.
        self.save_error: str | None = None
        self.stopped_all = False
        self.closed = False
        self.node_command: tuple[str, ...] = FAKE_COMMAND
        self.port_range: tuple[int, int] | None = None
        self._ids = self.machine.ids
        #: While set to an Event, each start stays in flight (its child coming up) until the event is set.
        self.hold_starts: asyncio.Event | None = None
        #: The nodes whose start is in flight, each with the event set when it ends.
        self.in_flight: dict[str, asyncio.Event] = {}

    # orchestrator surface
    def subscribe(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener) if listener in self.listeners else None

    def get(self, handle_id):
        return self.handles.get(handle_id) if handle_id else None

    def is_running(self, handle_id):
        h = self.get(handle_id)
        return bool(h and h.alive)

    def list_nodes(self):
        return list(self.handles.values())

    def handles_for(self, node_id):
        return [h for h in self.handles.values() if h.node_id == node_id]

    def status(self, handle_id):
        return DriverStatus.UNKNOWN if not handle_id else status_of(self.get(handle_id))

    async def start(self, node_id, attempt, secret_env, *, want_ports=None, avoid_ports=()):
        await self._idle(node_id)
        for h in self.handles_for(node_id):
            if h.alive and attempt > 0 and h.attempt == attempt:
                h.adopted = True
                return h
        if self.hold_starts is not None:
            # In flight, as the local driver's child coming up on its thread: the loop goes on.
            done = self.in_flight[node_id] = asyncio.Event()
            try:
                await self.hold_starts.wait()
            finally:
                del self.in_flight[node_id]
                done.set()
        return self.spawn(node_id, secret_env, want_ports=want_ports, avoid_ports=avoid_ports, attempt=attempt)

    async def _idle(self, node_id=None):
        """Wait for the start in flight of `node_id` (None: of every node), as the local driver does."""
        while waiting := [ev for nid, ev in self.in_flight.items() if node_id is None or nid == node_id]:
            await waiting[0].wait()

    def spawn(self, node_id, secret_env, *, want_ports=None, avoid_ports=(), attempt=0):
        if self.closed:
            raise SpawnError("the host is shutting down")
        if self.spawn_error is not None:
            raise self.spawn_error
        for old in self.handles_for(node_id):
            # Replaced: the instance ends with no exit told (the local driver kills it unwatched).
            old.alive = False
            del self.handles[old.id]
            self.machine.instances.pop(old.id, None)
        n = next(self._ids)
        api, p2p = want_ports or self._ports(n)
        handle = FakeHandle(f"{node_id}.{n}", node_id, 1000 + n, api, p2p, attempt=attempt,
                            command=tuple(self.node_command), forked=self.fork_starts)
        self.handles[handle.id] = handle
        self.machine.instances[handle.id] = handle
        # What a test compares: the secret the child got (name and host token are checked apart).
        self.spawned.append((node_id, {k: v for k, v in secret_env.items() if k in SECRET_VARS}))
        self.envs.append((node_id, dict(secret_env)))
        return handle

    def _ports(self, n: int) -> tuple[int, int]:
        if self.port_range is None:
            return 40000 + 2 * n, 40001 + 2 * n
        low, high = self.port_range
        api = low + (2 * n) % max(1, high - low)
        return api, api + 1

    async def stop(self, handle_id):
        self.stopped.append(handle_id)
        if self.on_stop:
            self.on_stop(handle_id)
        h = self.get(handle_id)
        if h and h.alive:
            h.stop_requested = True
            self.exit(handle_id, code=0, requested=True)

    async def stop_node(self, node_id):
        await self._idle(node_id)
        for h in self.handles_for(node_id):
            await self.stop(h.id)

    async def remove_node(self, node_id):
        await self.stop_node(node_id)
        for h in self.handles_for(node_id):
            del self.handles[h.id]
            self.machine.instances.pop(h.id, None)
        self.logs.pop(node_id, None)
        self.removed.append(node_id)

    def trim_logs(self):
        pass

    def log_tail(self, node_id, lines=20, max_bytes=16384):
        return self.logs.get(node_id, [])[-lines:]

    async def init(self):
        """Re-attach what a closed driver on the same machine left running; the clean-quit list is read once."""
        for h in self.machine.instances.values():
            if h.alive and h.id not in self.handles:
                h.adopted = False
                self.handles[h.id] = h
        stopped_cleanly = frozenset(self.machine.stopped_cleanly)
        self.machine.stopped_cleanly.clear()
        return InitReport(attached=[h for h in self.handles.values() if h.alive], stopped_cleanly=stopped_cleanly)

    async def stop_all(self, leave=frozenset()):
        self.stopped_all = True
        await self._idle()
        live = [h for h in self.handles.values() if h.alive and h.node_id not in leave]
        for h in live:
            await self.stop(h.id)
        self.machine.stopped_cleanly = {h.node_id for h in live}

    def close(self):
        """Stop watching: a closed driver tells no more exits; its instances keep running."""
        self.closed = True
        self.listeners.clear()

    def caps_enforcement(self, caps: NodeCaps, node_id: str | None = None) -> CapsEnforcement:
        if node_id in self.unheld:  # the OS did not hold this node's child to its caps
            return CapsEnforcement(enforced=False, how=f"not enforced for this node: {self.unheld[node_id]}")
        return CapsEnforcement(enforced=not (caps.cpu_percent or caps.memory_mb), how="not enforced: a fake driver")

    def reconfigure(self, config):
        self.config = config
        self.node_command = tuple(config.node_command)
        self.port_range = config.port_range

    # test controls
    def add_live(self, node_id, handle_id=None) -> FakeHandle:
        n = next(self._ids)
        handle = FakeHandle(handle_id or f"{node_id}.{n}", node_id, 1000 + n, 40000 + 2 * n, 40001 + 2 * n)
        self.handles[handle.id] = handle
        self.machine.instances[handle.id] = handle
        return handle

    def say(self, node_id, *lines: str) -> None:
        """The node prints `lines` to its log."""
        self.logs.setdefault(node_id, []).extend(lines)

    def exit(self, handle_id, code=1, requested=False, cause=None):
        h = self.handles[handle_id]
        h.alive = False
        h.returncode = code
        for listener in list(self.listeners):
            listener(Exit(h.id, h.node_id, h.pid, code, requested, cause))

    def spawns_of(self, node_id):
        return [s for s in self.spawned if s[0] == node_id]
