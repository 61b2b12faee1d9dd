"""The systemd driver: each start of a node is a transient unit of the person's user manager.

`start` asks the manager (`StartTransientUnit`) for `cadre-<home>-<node>-<attempt>.service`
with `Restart=no` (the host supervises), the node contract's plain variables, its caps as
`MemoryMax`, `CPUQuota` and `Nice`, its output appended to the node's log, and its stdin a
pipe holding its secrets (`units`). A live unit of the same attempt is adopted; one of an
earlier attempt is killed first. An end is heard from the unit's own properties
(`PropertiesChanged` of `ActiveState`, `ExecMainStatus` and `Result`; `bus`), never polled.
`stop` is `StopUnit` bounded by the stop timeout, then `KillUnit` SIGKILL of the unit's
whole cgroup. `close` leaves the units running; the next host's `init` lists the home's
units and re-attaches to them. Every start is cold: no warm standby, no fork server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cadre_desktop.errors import MachineError, SpawnError
from cadre_desktop.files.atomicfile import ensure_private_dir
from cadre_desktop.host.core.driver import CapsEnforcement, DriverConfig, DriverStatus, Exit, InitReport, NodeCaps, status_of
from cadre_desktop.host.core.events import Listeners
from cadre_desktop.host.systemd import oomwatch, quitlist, units
from cadre_desktop.host.systemd.bus import SERVICE, UNIT, BusError, Change, UserBus, unit_path
from cadre_desktop.host.systemd.instances import LIVE_STATES, Unit, handle_id, invocation_hex
from cadre_desktop.host.systemd.needs import LogBook, Ports
from cadre_desktop.paths import Paths

log = logging.getLogger(__name__)

#: How long a unit may take from its start call to running (or having failed).
COME_UP_S = 20.0
#: How long the kill of a unit may take to be heard of after the stop timeout.
KILL_S = 5.0
START_SIGNATURE = "ssa(sv)a(sa(sv))"
NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"


class SystemdDriver:
    def __init__(self, *, paths: Paths, bus: UserBus, home_id: str, node_command: list[str], ports: Ports,
                 logs: LogBook, bind_host: str, advertise_host: Callable[[], str], stop_timeout_s: float = 5.0,
                 caps_for: Callable[[str], NodeCaps] | None = None, host_env: Mapping[str, str] | None = None) -> None:
        self.paths = paths
        self.bus = bus
        self.home_id = home_id
        self.node_command = list(node_command)
        self.ports = ports
        self.logs = logs
        self.bind_host = bind_host
        self.advertise_host = advertise_host
        self.stop_timeout_s = stop_timeout_s
        self.caps_for = caps_for or (lambda _node_id: NodeCaps(low_priority=False))
        self.host_env = dict(os.environ if host_env is None else host_env)
        self.quit_file = paths.state_file.with_name(quitlist.FILE_NAME)
        #: handle id -> row; a row is listed until its node is started again or removed.
        self._units: dict[str, Unit] = {}
        #: unit object path -> the row of its current start (its changes go there).
        self._by_path: dict[str, Unit] = {}
        #: node id -> the end of its start in flight.
        self._starting: dict[str, asyncio.Event] = {}
        self._oom_stops: dict[str, Callable[[], None]] = {}
        #: Reads of a capped unit's cgroup in flight (kept, so none is collected half-way).
        self._tasks: set[asyncio.Task[None]] = set()
        self._listeners: Listeners[Exit] = Listeners("exit")
        self._closed = False
        self._save_error: str | None = None
        bus.listen(self._on_change)
        bus.on_lost = self._lost

    @property
    def save_error(self) -> str | None:
        return self._save_error

    # -- queries ----------------------------------------------------------------------------

    def get(self, handle_id: str | None) -> Unit | None:
        return self._units.get(handle_id) if handle_id else None

    def is_running(self, handle_id: str | None) -> bool:
        return bool((row := self.get(handle_id)) and row.alive)

    def status(self, handle_id: str | None) -> DriverStatus:
        return status_of(self.get(handle_id)) if handle_id else DriverStatus.UNKNOWN

    def handles_for(self, node_id: str) -> list[Unit]:
        return [u for u in self._units.values() if u.node_id == node_id]

    def list_nodes(self) -> list[Unit]:
        return list(self._units.values())

    def subscribe(self, listener: Callable[[Exit], None]) -> Callable[[], None]:
        return self._listeners.add(listener)

    def log_tail(self, node_id: str, lines: int = 20, max_bytes: int = 16384) -> list[str]:
        return self.logs.tail(node_id, lines, max_bytes)

    def trim_logs(self) -> None:
        """A unit appends to its log itself: its old part moves to `.1` here, once per sweep."""
        for node_id in {u.node_id for u in self._units.values()}:
            self.logs.trim(node_id)

    def caps_enforcement(self, caps: NodeCaps, node_id: str | None = None) -> CapsEnforcement:
        """The unit's own properties hold the caps (systemd refuses a start it cannot cap)."""
        return CapsEnforcement(enforced=True, how=units.caps_words(caps))

    # -- start-up ---------------------------------------------------------------------------

    async def init(self) -> InitReport:
        """Connect to the manager, then re-attach to every live unit of this home (listed by name)."""
        try:
            await self.bus.connect()
        except (OSError, TimeoutError, ValueError) as exc:
            raise SpawnError(f"cannot reach the systemd user manager ({self.bus.address}): {exc}") from None
        ensure_private_dir(self.paths.nodes_dir, tighten=True)
        stopped_cleanly = await asyncio.to_thread(quitlist.read_once, self.quit_file)
        pattern = f"{units.family(self.home_id)}*{units.SUFFIX}"
        (rows,) = await self.bus.call("ListUnitsByPatterns", "asas", [sorted(LIVE_STATES), [pattern]])
        attached = []
        for row in rows:
            found = await self._attach(str(row[0]), str(row[6]))
            if found is not None:
                attached.append(found)
        return InitReport(attached=attached, stopped_cleanly=stopped_cleanly)

    async def _attach(self, name: str, path: str) -> Unit | None:
        """A live unit the last host started, as a row; None when it ended meanwhile or is not ours."""
        parsed = units.parse_name(self.home_id, name)
        if parsed is None:
            return None
        try:
            unit, service = await self.bus.properties(path, UNIT), await self.bus.properties(path, SERVICE)
        except BusError:
            return None  # ended and collected since it was listed
        env = units.env_of([str(v) for v in service.get("Environment", [])])
        invocation = invocation_hex(unit.get("InvocationID"))
        if unit.get("ActiveState") not in LIVE_STATES or not invocation:
            return None
        row = Unit(id=handle_id(parsed[0], invocation), node_id=parsed[0], unit=name, path=path, attempt=parsed[1],
                   api_port=_int(env.get("CADRE_API_PORT")), p2p_port=_int(env.get("CADRE_P2P_PORT")),
                   started_at=_stamp(service.get("ExecMainStartTimestamp")),
                   advertise_host=env.get("CADRE_ADVERTISE_HOST", ""), pid=_int(service.get("MainPID")),
                   invocation=invocation, control_group=str(service.get("ControlGroup", "")), seen_live=True,
                   memory_mb=_memory_mb(service.get("MemoryMax")))
        row.came_up.set()
        self._units[row.id], self._by_path[path] = row, row
        self.ports.reserve(row.ports)
        self._watch_oom(row)
        return row

    # -- starts -----------------------------------------------------------------------------

    async def start(self, node_id: str, attempt: int, secret_env: Mapping[str, str], *,
                    want_ports: tuple[int, int] | None = None, avoid_ports: Iterable[int] = ()) -> Unit:
        """The driver seam's start: a live unit this same attempt made is adopted, never a second one."""
        await self._idle(node_id)
        for row in self.handles_for(node_id):
            if row.alive and attempt > 0 and row.attempt == attempt:
                row.adopted = True
                return row
        if self._closed:
            raise SpawnError("the host is shutting down")
        done = self._starting[node_id] = asyncio.Event()
        try:
            return await self._start_unit(node_id, attempt, secret_env, want_ports, avoid_ports)
        finally:
            del self._starting[node_id]
            done.set()
            self._disconnect_when_closed()

    async def _idle(self, node_id: str | None = None) -> None:
        """Until no start of the node (of any node, for None) is in flight."""
        while waits := [e for n, e in self._starting.items() if node_id is None or n == node_id]:
            await waits[0].wait()

    async def _start_unit(self, node_id: str, attempt: int, secret_env: Mapping[str, str],
                          want: tuple[int, int] | None, avoid: Iterable[int]) -> Unit:
        await self._replace(node_id)
        ports = want if want and self.ports.try_reserve(want) else tuple(self.ports.allocate(2, avoid=avoid))
        work = self.paths.node_dir(node_id)
        name = units.unit_name(self.home_id, node_id, attempt)
        caps = self.caps_for(node_id)
        row = Unit(id="", node_id=node_id, unit=name, path=unit_path(name), attempt=attempt, api_port=ports[0],
                   p2p_port=ports[1], started_at=datetime.now(UTC).isoformat(timespec="seconds"),
                   advertise_host=self.advertise_host(), memory_mb=caps.memory_mb)
        try:
            env = units.node_vars(node_id=node_id, work=work, bind_host=self.bind_host, ports=row.ports,
                                  advertise_host=row.advertise_host, attempt=attempt, secret_env=secret_env)
            await asyncio.to_thread(self._prepare, node_id, work, name)
            await self._run_unit(row, env, caps, work)
        except _AlreadyRuns:
            return await self._adopt_unlisted(row)
        except BaseException as exc:
            await self._let_go(row)
            if isinstance(exc, BusError | OSError | TimeoutError):
                raise SpawnError(f"could not start the unit of node {node_id}: {exc}") from None
            raise
        if self._closed:
            await self._let_go(row)
            raise SpawnError("the host is shutting down")
        return self._track(row)

    async def _adopt_unlisted(self, row: Unit) -> Unit:
        """The unit of this attempt runs, though the books do not list it (started by a host that
        died as this one's `init` listed the units): it is adopted, never a second one started."""
        if self._by_path.get(row.path) is row:
            del self._by_path[row.path]
        self.ports.release(row.ports)
        found = await self._attach(row.unit, row.path)
        if found is None:
            raise SpawnError(f"the unit {row.unit} of node {row.node_id} exists and could not be taken over")
        found.adopted = True
        return found

    def _prepare(self, node_id: str, work: Path, name: str) -> None:
        ensure_private_dir(work)
        ensure_private_dir(self.logs.path(node_id).parent)
        self.logs.note(node_id, f"starting node {node_id} as the systemd unit {name}")

    async def _run_unit(self, row: Unit, env: dict[str, str], caps: NodeCaps, work: Path) -> None:
        """Ask the manager for the unit, its stdin a pipe holding the line; wait until it runs or ended."""
        start = units.Start(command=tuple(self.node_command), env=units.plain_env(env, self.host_env), work=work,
                            log=self.logs.path(row.node_id), stop_timeout_s=self.stop_timeout_s, caps=caps,
                            description=f"cadre-desktop node {row.node_id} (attempt {row.attempt})")
        from dbus_fast import Variant

        props = [[name, Variant(sig, value)] for name, sig, value in units.properties(start)]
        self._by_path[row.path] = row  # before the call: not one of its changes is missed
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, units.stdin_line(env))  # far under a pipe's buffer: never blocks
            os.close(write_end)
            write_end = -1
            try:
                await self.bus.call("StartTransientUnit", START_SIGNATURE, [row.unit, "fail", props, []], fds=[read_end])
            except BusError as exc:
                if exc.name != "org.freedesktop.systemd1.UnitExists":
                    raise
                if (await self.bus.properties(row.path, UNIT)).get("ActiveState") in LIVE_STATES:
                    raise _AlreadyRuns("the unit runs already") from None
                # A unit of this name ended and was not collected yet: reset it, and start once more.
                await self._quietly("ResetFailedUnit", "s", [row.unit])
                await self.bus.call("StartTransientUnit", START_SIGNATURE, [row.unit, "fail", props, []], fds=[read_end])
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        async with asyncio.timeout(COME_UP_S):
            await row.came_up.wait()
        if row.alive and not row.invocation:
            row.invocation = invocation_hex((await self.bus.properties(row.path, UNIT)).get("InvocationID"))
        if not row.alive and row.could_not_exec():
            raise SpawnError(f"could not start the node program {self.node_command[0]!r} in its unit. "
                             "Check 'node_command' in settings.json.")

    def _track(self, row: Unit) -> Unit:
        """The started unit in the books; an end heard before this is told now."""
        row.id = handle_id(row.node_id, row.invocation or os.urandom(6).hex())
        self._units[row.id] = row
        if row.alive:
            self._watch_oom_soon(row)
        else:
            self._tell(row)
        return row

    async def _replace(self, node_id: str) -> None:
        """Take the node's previous rows out of the books; a live one (an earlier attempt) is killed,
        its end no news, and gone before the new unit takes its ports and folder."""
        for old in self.handles_for(node_id):
            del self._units[old.id]
            self.ports.release(old.ports)
            if old.alive:
                old.replaced = old.stop_requested = True
                log.info("node %s: a new start replaces its running unit %s", node_id, old.unit)
                await self._kill(old)

    async def _let_go(self, row: Unit) -> None:
        """A start that will not be tracked (failed, cancelled, closed): its unit ended, its ports freed."""
        row.replaced = row.stop_requested = True
        if row.alive and self._by_path.get(row.path) is row:
            await asyncio.shield(self._kill(row))
        if self._by_path.get(row.path) is row:
            del self._by_path[row.path]
        self.ports.release(row.ports)

    # -- ends -------------------------------------------------------------------------------

    def _on_change(self, change: Change) -> None:
        path, interface, changed = change
        row = self._by_path.get(path)
        if row is None or not row.alive:
            return
        if interface == SERVICE:
            row.service.update(changed)
            if _int(changed.get("MainPID")):
                row.pid = _int(changed.get("MainPID"))
            if changed.get("ControlGroup"):
                row.control_group = str(changed["ControlGroup"])
            return
        if interface != UNIT:
            return
        if invocation := invocation_hex(changed.get("InvocationID")):
            row.invocation = row.invocation or invocation
        state = changed.get("ActiveState")
        if state in LIVE_STATES:
            row.seen_live = True
            if state == "active":
                row.came_up.set()
        elif state in ("inactive", "failed") and row.seen_live:
            self._ended(row, row.exit_code())

    def _lost(self) -> None:
        """The manager's bus went away: no end would be heard any more, so every live unit is told
        as ended (its code unknown) and the supervisor's respawns say why they cannot start."""
        for row in [u for u in self._units.values() if u.alive]:
            self._ended(row, None)

    def _ended(self, row: Unit, code: int | None) -> None:
        if not row.alive:
            return
        row.alive, row.returncode = False, code
        row.ended.set()
        row.came_up.set()
        if self._by_path.get(row.path) is row:
            del self._by_path[row.path]
        if stop := self._oom_stops.pop(row.path, None):
            stop()
        if row.id:
            self._tell(row)

    def _tell(self, row: Unit) -> None:
        """Its end, once: its output went to its log straight from its processes, all gone with its cgroup."""
        if row.replaced or self._closed or self._units.get(row.id) is not row:
            return
        self._listeners.tell(Exit(row.id, row.node_id, row.pid, row.returncode, row.stop_requested, row.exit_cause()))

    def _watch_oom_soon(self, row: Unit) -> None:
        if row.memory_mb and row.control_group:  # told with its start's changes: watched at once
            self._watch_oom(row)
        elif row.memory_mb:
            task = asyncio.get_running_loop().create_task(self._read_cgroup_and_watch(row))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _read_cgroup_and_watch(self, row: Unit) -> None:
        if not row.control_group:
            try:
                row.control_group = str((await self.bus.properties(row.path, SERVICE)).get("ControlGroup", ""))
            except (BusError, TimeoutError):
                return
        self._watch_oom(row)

    def _watch_oom(self, row: Unit) -> None:
        if not row.memory_mb or not row.alive or row.path in self._oom_stops:
            return

        def hit() -> None:
            row.oom_killed = True
        stop = oomwatch.watch(asyncio.get_running_loop(), row.control_group, hit)
        if stop is not None:
            self._oom_stops[row.path] = stop

    # -- stops ------------------------------------------------------------------------------

    async def stop(self, handle_id: str | None) -> None:
        row = self.get(handle_id)
        if row is not None and row.alive:
            await self._stop(row, asyncio.get_running_loop().time() + self.stop_timeout_s)

    async def _stop(self, row: Unit, deadline: float) -> None:
        """`StopUnit` (SIGTERM to its cgroup), wait until `deadline`, then `KillUnit` SIGKILL."""
        row.stop_requested = True
        try:
            await self.bus.call("StopUnit", "ss", [row.unit, "replace"])
        except BusError as exc:
            if exc.name == NO_SUCH_UNIT:
                self._ended(row, row.exit_code())  # collected before its change reached us
                return
            log.warning("node %s: StopUnit of %s: %s", row.node_id, row.unit, exc)
        if await _within(row.ended, deadline - asyncio.get_running_loop().time()):
            return
        log.warning("node %s did not stop within %.1fs; killing its unit", row.node_id, self.stop_timeout_s)
        await self._kill(row)

    async def _kill(self, row: Unit) -> None:
        """SIGKILL to every process of the unit; wait (bounded) for its end to be heard."""
        try:
            await self.bus.call("KillUnit", "ssi", [row.unit, "all", int(signal.SIGKILL)])
        except BusError as exc:
            if exc.name in (NO_SUCH_UNIT, "org.freedesktop.systemd1.NoSuchProcess"):
                self._ended(row, row.exit_code())  # never started, or collected before its change reached us
                return
            log.warning("node %s: KillUnit of %s: %s", row.node_id, row.unit, exc)
        except TimeoutError as exc:
            log.warning("node %s: KillUnit of %s: %s", row.node_id, row.unit, exc)
        if not await _within(row.ended, KILL_S):
            log.error("node %s: its unit %s did not end after SIGKILL", row.node_id, row.unit)
            self._ended(row, None)

    async def _quietly(self, member: str, signature: str, body: list[object]) -> None:
        try:
            await self.bus.call(member, signature, body)
        except (BusError, TimeoutError) as exc:
            log.debug("%s %s: %s", member, body[0], exc)

    async def stop_node(self, node_id: str) -> None:
        await self._idle(node_id)  # a start in flight brings a unit this stops too
        for row in self.handles_for(node_id):
            await self.stop(row.id)

    async def remove_node(self, node_id: str) -> None:
        """Stop its unit, forget it, delete its work folder and log: no unit and no cgroup are left."""
        await self.stop_node(node_id)
        for row in self.handles_for(node_id):
            del self._units[row.id]
            self.ports.release(row.ports)
            await self._quietly("ResetFailedUnit", "s", [row.unit])
        await asyncio.to_thread(self._delete_files, node_id)

    def _delete_files(self, node_id: str) -> None:
        shutil.rmtree(self.paths.node_dir(node_id), ignore_errors=True)
        if self.paths.node_dir(node_id).exists():
            raise OSError(f"could not delete the work folder of node {node_id}")
        self.logs.delete(node_id)

    async def stop_all(self, leave: frozenset[str] = frozenset()) -> None:
        """Every unit but those of `leave` stopped at once (one grace for all), noted for the next `init`."""
        await self._idle()
        live = [u for u in self._units.values() if u.alive and u.node_id not in leave]
        deadline = asyncio.get_running_loop().time() + self.stop_timeout_s
        await asyncio.gather(*(self._stop(u, deadline) for u in live))
        await asyncio.to_thread(quitlist.write, self.quit_file, [u.node_id for u in live])

    def close(self) -> None:
        """Stop watching; the units run on, the manager's, for the next host to re-attach."""
        self._closed = True
        self._listeners.clear()
        for task in list(self._tasks):
            task.cancel()
        for stop in self._oom_stops.values():
            stop()
        self._oom_stops.clear()
        self._disconnect_when_closed()

    def _disconnect_when_closed(self) -> None:
        """The bus stays while a start is in flight: it ends that start's unit."""
        if self._closed and not self._starting:
            self.bus.disconnect()

    def reconfigure(self, config: DriverConfig) -> None:
        """The next units run the new program, on the new range, with the new stop grace."""
        self.node_command = list(config.node_command)
        self.ports.low, self.ports.high = config.port_range
        self.stop_timeout_s = config.stop_timeout_s


class _AlreadyRuns(MachineError):
    """The unit a start asked for runs already (the same attempt): adopt it."""

    code = "unit_already_runs"


async def _within(event: asyncio.Event, seconds: float) -> bool:
    try:
        async with asyncio.timeout(max(seconds, 0.0)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _stamp(usec: Any) -> str:
    if not _int(usec):
        return ""
    return datetime.fromtimestamp(_int(usec) / 1_000_000, UTC).isoformat(timespec="seconds")


def _memory_mb(value: Any) -> int | None:
    limit = _int(value)
    return limit >> 20 if 0 < limit < (1 << 62) else None
