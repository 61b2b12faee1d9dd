"""The process orchestrator: spawns node programs and knows which are alive.

A *handle* is the orchestrator's row for one spawned child: its pid together with the process's start time
(and boot id on Linux), so a pid the OS has since given to another program is never adopted or signalled. Live
handles persist in `state.json` (0600); a restarted host re-attaches to every child still running and reports
the others as dead. Secrets reach the child through its environment only; nothing of it is persisted.

Each child runs in its own session / process group (a Job object on Windows), so the host's death does not
take it down, and everything it starts is ended with it: Stop ends the whole group (terminate, a grace period,
then kill), and so do a respawn, a give-up, a Remove and a Quit when the leader has already died, since what
it left behind would hold the node's work folder and ports (see `proctree`). Its output goes to the home's log
keeper, which keeps the log under its cap as it is written (see `keeper`; a pump per node on Windows, see
`nodelogs`); where its folder and log are is `Paths`'s to say. Its fork/exec runs on a thread (`spawner`), the
rest of a start (a parked child's take too) on the loop; warm: `standby`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from cadre_desktop.errors import SpawnError
from cadre_desktop.files.atomicfile import ensure_private_dir
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.core.driver import CapsEnforcement, DriverConfig, DriverStatus, InitReport, NodeCaps, status_of
from cadre_desktop.host.core.events import Listeners
from cadre_desktop.host.local import launch, nodelogs
from cadre_desktop.host.local.config import LocalConfig
from cadre_desktop.host.local.handles import ExitEvent, ExitListener, Handle, StateFile, read_state
from cadre_desktop.host.local.keeper import LogKeeper
from cadre_desktop.host.local.limits.caps import CapsKeeper, no_caps
from cadre_desktop.host.local.nodelogs import LOG_CAP_BYTES, NodeLogs
from cadre_desktop.host.local.parked import Parked
from cadre_desktop.host.local.ports import PortAllocator
from cadre_desktop.host.local.spawner import Spawner
from cadre_desktop.host.local.standby import Standby, StandbyPool
from cadre_desktop.host.local.system.seam import ProcessOS, for_this_os
from cadre_desktop.host.local.teardown import Ender, delete_node_files, reclaim_untracked
from cadre_desktop.paths import Paths

log = logging.getLogger(__name__)

#: How long an exit's listeners wait at most for the child's last lines to reach its log.
PUMP_FLUSH_S = 2.0


class Orchestrator:
    def __init__(
        self,
        *,
        paths: Paths,
        node_command: list[str],
        ports: PortAllocator,
        bind_host: str,
        advertise_host: Callable[[], str],
        stop_timeout_s: float = 5.0,
        system: ProcessOS | None = None,
        log_cap_bytes: int = LOG_CAP_BYTES,
        warm_standby: bool = False,
        caps: CapsKeeper | None = None,
        writer: GroupWriter | None = None,
    ) -> None:
        self.paths = paths
        self.state_file = paths.state_file
        self.nodes_dir = paths.nodes_dir
        self.node_command = list(node_command)
        self.ports = ports
        self.bind_host = bind_host
        self.advertise_host = advertise_host
        self.stop_timeout_s = stop_timeout_s
        #: Every OS call on a process (`system/seam.py`): this OS's, chosen once, here or by `drivers`.
        self.system = system = system or for_this_os()
        self.logs = NodeLogs(paths, log_cap_bytes)
        self.ender = Ender(self.nodes_dir, system)
        self.caps = caps or no_caps(system)  # the OS's limits on each child (see `caps`)
        #: The one process writing every node's log (POSIX; Windows children get a pump each).
        self.keeper = LogKeeper(paths, system) if system.log_keeper else None
        #: One node program loaded ahead for the next start (see `standby`); None: every start is cold.
        self.standby = self._standby_pool() if warm_standby else None
        self._handles: dict[str, Handle] = {}
        #: Each start's fork/exec, off the loop; the starts in flight (see `spawner`).
        self.spawner: Spawner[launch.Launched] = Spawner(lambda launched: launch.discard(launched, system))
        self._listeners: Listeners[ExitEvent] = Listeners("exit")
        #: Exits waiting for their pump to write the node's last lines (`_on_exit`).
        self._telling: set[asyncio.Task[None]] = set()
        self._closed = False
        #: state.json, written now or (after an exit) once the exit's listeners had their turn.
        self.state = StateFile(self.state_file, self._handles)
        self.state.writer = writer
        #: A Quit is stopping every child: it writes state.json once at its end.
        self._stopping_all = False

    @property
    def save_error(self) -> str | None:
        """Why the last write of state.json failed (None once one succeeds): shown with the views."""
        return self.state.save_error

    # -- queries -------------------------------------------------------------

    def get(self, handle_id: str | None) -> Handle | None:
        return self._handles.get(handle_id) if handle_id else None

    def is_running(self, handle_id: str | None) -> bool:
        return bool((handle := self.get(handle_id)) and handle.alive)

    def list_nodes(self) -> list[Handle]:
        return list(self._handles.values())

    def status(self, handle_id: str | None) -> DriverStatus:
        """An exit not told yet still runs: its log may miss its last line (judged when told)."""
        handle = self.get(handle_id)
        if not handle_id or (handle is not None and handle.exit_pending):
            return DriverStatus.RUNNING if handle_id else DriverStatus.UNKNOWN
        return status_of(handle)

    def handles_for(self, node_id: str) -> list[Handle]:
        return [h for h in self._handles.values() if h.node_id == node_id]

    def subscribe(self, listener: ExitListener) -> Callable[[], None]:
        return self._listeners.add(listener)

    # -- start-up --------------------------------------------------------------

    async def init(self) -> InitReport:
        """Re-attach to every persisted child that is still the same process.

        Then one census of the process table: a session leader running for one
        of our nodes that no handle names (a host killed between a spawn and its
        state write) is tracked again; anything else of our nodes that no live
        child owns (what a leader that died while no host watched left behind)
        is ended before supervision starts.
        """
        persisted, stopped_cleanly = read_state(self.state_file)
        # nodes/ 0700 before any work folder in it: mkdir(parents=True) would make it 0755.
        ensure_private_dir(self.nodes_dir, tighten=True)
        if self.keeper is not None:
            await self.keeper.attach()
        attached, dead = [], []
        for handle in persisted.values():
            now = self.system.read_identity(handle.pid)
            if handle.identity.matches(now):
                self._attach(handle)
                attached.append(handle)
            else:
                dead.append(handle.id)
                log.info("node %s: its child (pid %s) is gone since the last run", handle.node_id, handle.pid)
        untracked = await reclaim_untracked(self.nodes_dir, self._owned(), self.system)
        for found in untracked:
            self._attach(found)
            attached.append(found)
        if dead or untracked or stopped_cleanly:
            self.state.write()  # the clean-stop list is read once
        if self.standby is not None:
            self.standby.fill_soon()
        return InitReport(attached=attached, stopped_cleanly=stopped_cleanly)

    def _attach(self, handle: Handle) -> None:
        loop = asyncio.get_running_loop()
        self._handles[handle.id] = handle
        self.ports.reserve(handle.ports)
        handle._job_handle = self.system.reopen_job(handle.job)
        self.caps.adopted(handle)
        handle._cancel_watch = self.system.watch_exit(loop, handle.pid, None, lambda code: self._on_exit(handle, code))
        launch.attach_log(handle, self.keeper, self.logs, self.system)

    def _owned(self) -> dict[int, str]:
        """Each live leader's group id (its pid where there are no groups) -> its node."""
        return {h.pgid or h.pid: h.node_id for h in self._handles.values() if h.alive}

    def _choose_ports(self, want: tuple[int, int] | None, avoid: Iterable[int] = ()) -> tuple[int, int]:
        """Keep the node's previous ports when they are free, so its claim URL stays valid."""
        if want and self.ports.try_reserve(want):
            return want
        api, p2p = self.ports.allocate(2, avoid=avoid)
        return api, p2p

    def _drop_stale(self, node_id: str) -> list[Handle]:
        """Take out the node's previous handles and free their ports; reversible (`_restore`)."""
        dropped = [h for h in self._handles.values() if h.node_id == node_id]
        for h in dropped:
            del self._handles[h.id]
            self.ports.release(h.ports)
        return dropped

    def _restore(self, dropped: Iterable[Handle]) -> None:
        """Undo a drop, but for a handle whose ports another start took meanwhile (it was ended)."""
        for h in dropped:
            if self.ports.try_hold(h.ports):
                self._handles[h.id] = h

    async def start(self, node_id: str, attempt: int, secret_env: Mapping[str, str], *,
                    want_ports: tuple[int, int] | None = None, avoid_ports: Iterable[int] = ()) -> Handle:
        """The driver seam's start: a live child that this same attempt made is adopted.

        A host that died after starting a child and before its record named it
        comes back to find that child running (state.json, or the scan for
        untracked children); starting the same attempt again returns it rather
        than a second child on the same ports and folder. Two never overlap.
        """
        await self.spawner.idle(node_id)
        for handle in self.handles_for(node_id):
            if handle.alive and attempt > 0 and handle.attempt == attempt:
                handle.adopted = True
                return handle
        return await self.spawn(node_id, secret_env, want_ports=want_ports, avoid_ports=avoid_ports, attempt=attempt)

    async def spawn(self, node_id: str, secret_env: Mapping[str, str], *, want_ports: tuple[int, int] | None = None,
                    avoid_ports: Iterable[int] = (), attempt: int = 0) -> Handle:
        """Start the node program for `node_id` and return its live handle.

        On the loop with no await between: the node's previous handles dropped (a child still running,
        or what one left behind, sent a kill; not waited for), ports chosen and held, environment made.
        The child starts on a worker thread (`spawner`) while the loop goes on, the dropped handles out
        meanwhile (an exit of a replaced child then is the stop it was asked to be). Then it is tracked;
        or, failed, the ports let go and the dropped handles put back. A start let go meanwhile (its
        caller cancelled, the driver closed) ends its child.
        """
        await self.spawner.idle(node_id)
        if self._closed:
            raise SpawnError("the host is shutting down")
        dropped = self._drop_stale(node_id)
        for old in dropped:
            if old.alive:
                self._end_replaced(old)
            else:
                self.ender.end_now(old)
        work = self.paths.node_dir(node_id)
        self.ender.end_lock_holder(node_id, work)
        try:
            ports = self._choose_ports(want_ports, avoid_ports)
        except Exception:
            self._restore(dropped)
            raise
        handle_id = f"{node_id}.{secrets.token_hex(4)}"
        try:
            ensure_private_dir(work)
            env = launch.node_env(os.environ, node_id=node_id, work=work, bind_host=self.bind_host, ports=ports,
                                  advertise_host=self.advertise_host(), attempt=attempt, secret_env=secret_env)
            launched = await self._launch(node_id, handle_id, env, work)
        except OSError as exc:
            self.ports.release(ports)
            self._restore(dropped)
            raise launch.start_error(node_id, self.node_command, exc) from None
        except BaseException:
            self.ports.release(ports)
            self._restore(dropped)
            raise
        # From here on nothing may throw: the child exists and must be tracked.
        handle = self._track(node_id, handle_id, launched, ports, env, attempt)
        for old in dropped:
            self._unwatch(old)
        self.state.write_behind()
        return handle

    def _end_replaced(self, handle: Handle) -> None:
        """A start of a new attempt replaces a live instance: its group is killed now (a start
        never waits); no exit is told for it (`_on_exit`), and it is unwatched once the new one runs."""
        handle.stop_requested = True
        if self._same_process(handle):
            log.info("node %s: a new start replaces its running child (pid %s)", handle.node_id, handle.pid)
            self.ender.signal(handle, kill=True)

    async def _launch(self, node_id: str, handle_id: str, env: dict[str, str], work: Path) -> launch.Launched:
        join = self.caps.before_spawn(node_id)  # its groups ready (caps.py); a handed-over standby joins after
        log_path, pool, kept, cap = self.logs.path(node_id), self.standby, self.keeper is not None, self.logs.cap
        claimed = pool.claim() if pool is not None and not self.caps.starts_cold(node_id) else None  # loaded, if fit
        if pool is not None:
            pool.fill_soon()
        command, lower, header = list(self.node_command), self.caps.lower_soon(node_id), nodelogs.header(node_id)
        held = frozenset(h.pid for h in self._handles.values() if h.alive)  # no fork server may name one of these
        standby = claimed if isinstance(claimed, Standby) else None
        launched = None if not isinstance(claimed, Parked) else await self.spawner.run_here(node_id, partial(  # no thread's hops
            launch.take, claimed, env, header, join, system=self.system, started=lower, held=held, kept=kept))

        def blocking() -> launch.Launched:  # on the start's thread: forked or handed over from the standby, else cold
            warm = None if standby is None else launch.warm(
                standby, env, header, join, log_path=log_path, node_id=node_id, log_cap=cap, system=self.system,
                kept=kept, started=lower, held=held)
            return warm or launch.launch(command, env, work, log_path=log_path, node_id=node_id, log_cap=cap, kept=kept,
                                         handle_id=handle_id, system=self.system, join=join, started=lower)
        launched = launched or await self.spawner.run(node_id, blocking)
        if pool is not None and claimed is not None:  # how the standby did
            pool.settle(claimed, launched.popen)
        if self.keeper is not None:
            launch.keep(launched, self.keeper, handle_id=handle_id, node_id=node_id, log_path=log_path, log_cap=cap,
                        system=self.system)
        return launched

    def _track(self, node_id: str, handle_id: str, launched: launch.Launched, ports: tuple[int, int],
               env: dict[str, str], attempt: int) -> Handle:
        handle = launch.new_handle(node_id, handle_id, launched, ports, env, attempt, self.system)
        self._handles[handle.id] = handle
        self.caps.place(handle)
        if launched.pump is not None:
            launch.watch_pump(launched.pump, handle, self.system)
        try:
            handle._cancel_watch = self.system.watch_exit(
                asyncio.get_running_loop(), handle.pid, handle.popen, lambda code: self._on_exit(handle, code)
            )
        except Exception as exc:  # the child runs unwatched; the supervisor's sweep still sees it die
            log.error("node %s: cannot watch its child for exits: %s", node_id, exc)
        return handle

    def _unwatch(self, handle: Handle) -> None:
        if handle._cancel_watch:
            handle._cancel_watch()
            handle._cancel_watch = None

    # -- exits and stops -----------------------------------------------------------

    def _on_exit(self, handle: Handle, code: int | None) -> None:
        if not handle.alive:
            return
        handle.alive = False
        handle.returncode = code
        handle._exited.set()
        if handle.stop_requested and self._handles.get(handle.id) is not handle:
            return  # replaced by a start still in flight (dropped): its end is no news
        if not handle.stop_requested:
            if self.standby is not None:
                self.standby.note_exit()  # exits close together: a crowd, whose starts fork
            # Before the listeners hear of it: the respawn they start needs the folder and ports.
            self.ender.end_now(handle)
            if not handle._log_done.is_set():
                # The listeners read the node's last log line to say why it ended; its pump or
                # the keeper may not have written it yet. Both see the pipe's end, which says
                # the log is whole: tell once it came (within a bound).
                handle.exit_pending = True
                task = asyncio.get_running_loop().create_task(self._tell_when_flushed(handle, code))
                self._telling.add(task)
                task.add_done_callback(self._telling.discard)
                return
        self._tell_exit(handle, code)

    async def _tell_when_flushed(self, handle: Handle, code: int | None) -> None:
        try:
            async with asyncio.timeout(PUMP_FLUSH_S):  # a close's cancel is never dropped
                await handle._log_done.wait()
        except TimeoutError:
            log.debug("node %s: its output outlived it by %.1fs; its exit is told without waiting", handle.node_id, PUMP_FLUSH_S)
        self._tell_exit(handle, code)

    def _tell_exit(self, handle: Handle, code: int | None) -> None:
        handle.exit_pending = False
        cause = self.caps.exit_cause(handle, code)  # the memory cap's kill, said as such
        self._listeners.tell(ExitEvent(handle.id, handle.node_id, handle.pid, code, handle.stop_requested, cause))
        if self._handles.get(handle.id) is handle and not self._closed and not self._stopping_all:
            self.state.write_soon(lambda: not self._closed)

    def _same_process(self, handle: Handle) -> bool:
        return handle.identity.matches(self.system.read_identity(handle.pid))

    async def stop(self, handle_id: str | None) -> None:
        """Terminate the child's group, wait the grace period, then kill what is left of it.

        The grace covers the whole group: a leader that exits on the terminate
        while something it started does not still has that killed at the end.
        A leader that is already gone is never signalled; what its group left
        is ended if it carries the node's environment.
        """
        handle = self._handles.get(handle_id or "")
        if handle is not None and handle.alive:
            await self._stop(handle, asyncio.get_running_loop().time() + self.stop_timeout_s)

    async def _stop(self, handle: Handle, deadline: float) -> None:
        """One live child's stop by `deadline`: the terminate and the wait, or what its group left."""
        if self._terminate(handle):
            await self._finish_stop(handle, deadline)
        else:
            await self.ender.end_leftovers(handle)

    def _terminate(self, handle: Handle) -> bool:
        """Send the group its terminate; False when the leader is no longer ours to signal."""
        handle.stop_requested = True
        if not self._same_process(handle):
            # The pid is gone or belongs to someone else now: never signal it.
            self._on_exit(handle, None)
            return False
        self.ender.signal(handle, kill=False)
        return True

    async def _finish_stop(self, handle: Handle, deadline: float) -> None:
        """Wait for the group until `deadline`, then kill what is left of it."""
        if await self.ender.wait_gone(handle, deadline):
            return
        log.warning("node %s did not stop within %.1fs; killing it", handle.node_id, self.stop_timeout_s)
        if self._same_process(handle) or (not handle.alive and not self.ender.group_gone(handle)):
            self.ender.signal(handle, kill=True)
        if not await self.ender.wait_gone(handle, asyncio.get_running_loop().time() + 5.0) and handle.alive:
            self._on_exit(handle, None)

    async def stop_node(self, node_id: str) -> None:
        await self.spawner.idle(node_id)  # a start in flight brings a child this stops too
        for handle in self.handles_for(node_id):
            await self.stop(handle.id)

    async def remove_node(self, node_id: str) -> None:
        """Stop every process of the node, forget its handles, delete its work folder and log.
        Strays of the node (anything still carrying its environment) are ended first: its
        folder is never deleted from under a running process (nor a start in flight's)."""
        await self.stop_node(node_id)
        dropped = self._drop_stale(node_id)
        for handle in dropped:
            self._unwatch(handle)
        await self.ender.end_strays(self._owned(), node_id)
        for handle in dropped:
            await self.ender.wait_pump(handle)
        await self.caps.forget(node_id)
        self.state.write()
        await asyncio.to_thread(delete_node_files, self.paths, self.logs, node_id)

    async def stop_all(self, leave: frozenset[str] = frozenset()) -> None:
        """Stop every child at once (a clean quit), end any stray of our nodes, and write
        down which were stopped on purpose, so the next host starts them again without
        counting a failed attempt. The children of the nodes in `leave` (orphans) keep running,
        and their processes are not strays: their handles still own them.

        Every group gets its terminate in one go, all share one grace period, what is
        left then is killed; `state.json` is written once, at the end.
        """
        if self.standby is not None:
            self.standby.close()
        await self.spawner.idle()  # the starts in flight bring children this stops too
        live = [h for h in self._handles.values() if h.alive and h.node_id not in leave]
        self._stopping_all = True
        try:
            deadline = asyncio.get_running_loop().time() + self.stop_timeout_s
            signalled = [h for h in live if self._terminate(h)]
            gone = [h for h in live if h not in signalled]
            await asyncio.gather(*(self._finish_stop(h, deadline) for h in signalled),
                                 *(self.ender.end_leftovers(h) for h in gone))
            try:
                await self.ender.end_strays(self._owned())
            except Exception as exc:  # a quit must finish; the next start's census tries again
                log.error("could not look for stray node processes: %s", exc)
            await asyncio.gather(*(self.ender.wait_pump(h) for h in self._handles.values()))
            await self.caps.clear()
        finally:
            self._stopping_all = False
        self.state.write_or_log(stopped_cleanly=[h.node_id for h in live])

    def log_tail(self, node_id: str, lines: int = 20, max_bytes: int = 16384) -> list[str]:
        """The last lines of the node's log (a bounded read from the end)."""
        return self.logs.tail(node_id, lines, max_bytes)

    def trim_logs(self) -> None:
        """Keep under their cap the logs that no pump or keeper writes (children of an older
        build); a pump or the keeper caps its log as it writes."""
        for handle in self._handles.values():
            if not handle.pump_pid and not handle.log_kept:
                self.logs.trim(handle.node_id)

    def _standby_pool(self) -> StandbyPool:
        return StandbyPool(self.node_command, self.nodes_dir, lambda: dict(os.environ), self.system)

    def reconfigure(self, config: DriverConfig) -> None:
        """New settings for the next starts. A standby of the old node program is ended and
        one of the new program loaded (if warm starts are still wanted), so no start after a
        change runs the old one; warm starts turned on or off follow too (a config of another
        driver's kind than `LocalConfig` asks for none)."""
        command, warm = list(config.node_command), isinstance(config, LocalConfig) and config.warm_standby
        if self.standby is not None and (command != self.node_command or not warm):
            self.standby.close()
            self.standby = None
        self.node_command = command
        if warm and self.standby is None and not self._closed:
            self.standby = self._standby_pool()
            self.standby.fill_soon()
        self.ports.low, self.ports.high = config.port_range
        self.stop_timeout_s = config.stop_timeout_s

    def caps_enforcement(self, caps: NodeCaps, node_id: str | None = None) -> CapsEnforcement:
        return self.caps.enforcement(caps, node_id)

    def close(self) -> None:
        """Stop watching; children keep running (a restarted host re-attaches)."""
        self._closed = True
        self.spawner.close()  # a child still coming up is ended when it comes
        for task in list(self._telling):
            task.cancel()
        if self.standby is not None:
            self.standby.close()
        if self.keeper is not None:
            self.keeper.close()
        if self.state.pending:
            self.state.write_or_log()
        for handle in self._handles.values():
            self._unwatch(handle)
            if handle._cancel_pump_watch:
                handle._cancel_pump_watch()
                handle._cancel_pump_watch = None
            # The node's pump holds its job too (Windows), so closing ours does not end the node.
            self.system.close_job(handle._job_handle)
            handle._job_handle = None
        self._listeners.clear()
