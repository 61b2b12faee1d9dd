"""The process orchestrator: spawns node programs and knows which are alive.

A *handle* is the orchestrator's row for one spawned child: its pid together
with the process's start time (and boot id on Linux), so a pid the OS has since
given to another program is never adopted or signalled. Live handles persist in
`state.json` (0600); a restarted host re-attaches to every child still running
and reports the others as dead. Secrets reach the child through its environment
only; nothing of the environment is persisted.

Each child runs in its own session / process group, so the host's death does
not take it down, and Stop ends the whole group: terminate, a grace period,
then kill.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping

from cadre_desktop.atomicfile import ensure_private_dir
from cadre_desktop.errors import SpawnError, StorageError
from cadre_desktop.host import procs
from cadre_desktop.host.driver import DriverStatus, status_of
from cadre_desktop.host.handles import (  # noqa: F401 - re-exported for callers
    STATE_VERSION, ExitEvent, ExitListener, Handle, InitReport, find_untracked_children, read_state, write_state,
)
from cadre_desktop.host.ports import PortAllocator

log = logging.getLogger(__name__)

LOG_CAP_BYTES = 1 << 20
#: Variables the host sets for the child; inherited copies are dropped first.
_NODE_VARS_PREFIX = "CADRE_"


class Orchestrator:
    def __init__(
        self,
        *,
        state_file: Path,
        nodes_dir: Path,
        log_dir: Path,
        node_command: list[str],
        ports: PortAllocator,
        bind_host: str,
        advertise_host: Callable[[], str],
        stop_timeout_s: float = 5.0,
        platform: str = procs.CURRENT,
        log_cap_bytes: int = LOG_CAP_BYTES,
    ) -> None:
        self.state_file = state_file
        self.nodes_dir = nodes_dir
        self.log_dir = log_dir
        self.node_command = list(node_command)
        self.ports = ports
        self.bind_host = bind_host
        self.advertise_host = advertise_host
        self.stop_timeout_s = stop_timeout_s
        self.platform = platform
        self.log_cap_bytes = log_cap_bytes
        self._handles: dict[str, Handle] = {}
        self._listeners: list[ExitListener] = []
        self._closed = False
        #: An exit left state.json naming a dead child; see `_persist_soon`.
        self._persist_pending = False
        self._persist_scheduled = False

    # -- queries -------------------------------------------------------------

    def get(self, handle_id: str | None) -> Handle | None:
        return self._handles.get(handle_id) if handle_id else None

    def is_running(self, handle_id: str | None) -> bool:
        handle = self.get(handle_id)
        return bool(handle and handle.alive)

    def list_nodes(self) -> list[Handle]:
        return list(self._handles.values())

    def status(self, handle_id: str | None) -> DriverStatus:
        if not handle_id:
            return DriverStatus.UNKNOWN
        return status_of(self.get(handle_id))

    def handles_for(self, node_id: str) -> list[Handle]:
        return [h for h in self._handles.values() if h.node_id == node_id]

    def work_dir(self, node_id: str) -> Path:
        return self.nodes_dir / node_id

    def log_path(self, node_id: str) -> Path:
        return self.log_dir / f"node-{node_id}.log"

    def subscribe(self, listener: ExitListener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
        return unsubscribe

    # -- start-up --------------------------------------------------------------

    async def init(self) -> InitReport:
        """Re-attach to every persisted child that is still the same process."""
        loop = asyncio.get_running_loop()
        persisted, stopped_cleanly = read_state(self.state_file)
        attached, dead = [], []
        for handle in persisted.values():
            now = procs.read_identity(handle.pid, self.platform)
            if handle.identity.matches(now):
                self._handles[handle.id] = handle
                self.ports.reserve(handle.ports)
                handle._cancel_watch = procs.watch_exit(
                    loop, handle.pid, None, lambda code, h=handle: self._on_exit(h, code)
                )
                attached.append(handle)
            else:
                dead.append(handle.id)
                log.info("node %s: its child (pid %s) is gone since the last run", handle.node_id, handle.pid)
        tracked = {h.pid for h in self._handles.values()}
        strays = await asyncio.to_thread(find_untracked_children, self.nodes_dir, tracked, self.platform)
        for handle in strays:
            self._handles[handle.id] = handle
            self.ports.reserve(handle.ports)
            handle._cancel_watch = procs.watch_exit(
                loop, handle.pid, None, lambda code, h=handle: self._on_exit(h, code)
            )
            attached.append(handle)
            log.warning("node %s: found its child (pid %s) running untracked; tracking it again",
                        handle.node_id, handle.pid)
        if dead or strays or stopped_cleanly:
            self._persist()  # the clean-stop list is read once
        return InitReport(attached=attached, dead=dead, stopped_cleanly=stopped_cleanly)

    def _persist(self, stopped_cleanly: Iterable[str] = ()) -> None:
        self._persist_pending = False
        write_state(self.state_file, self._handles.values(), stopped_cleanly)

    def _node_env(self, node_id: str, handle_ports: tuple[int, int], secret_env: Mapping[str, str],
                  attempt: int = 0) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NODE_VARS_PREFIX)}
        env.update(
            CADRE_NODE_ID=node_id,
            CADRE_NODE_DIR=str(self.work_dir(node_id)),
            CADRE_API_HOST=self.bind_host,
            CADRE_API_PORT=str(handle_ports[0]),
            CADRE_P2P_PORT=str(handle_ports[1]),
            CADRE_ADVERTISE_HOST=self.advertise_host(),
            CADRE_START_ATTEMPT=str(attempt),
            PYTHONUNBUFFERED="1",
        )
        env.update(secret_env)
        return env

    def _choose_ports(self, want: tuple[int, int] | None, avoid: Iterable[int] = ()) -> tuple[int, int]:
        """Keep the node's previous ports when they are free, so its claim URL stays valid."""
        if want and self.ports.try_reserve(want):
            return want
        api, p2p = self.ports.allocate(2, avoid=avoid)
        return api, p2p

    def _drop_stale(self, node_id: str) -> list[Handle]:
        """Take out the node's previous handles and free their ports; reversible."""
        dropped = [h for h in self._handles.values() if h.node_id == node_id]
        for h in dropped:
            del self._handles[h.id]
            self.ports.release(h.ports)
        return dropped

    def _restore(self, dropped: Iterable[Handle]) -> None:
        for h in dropped:
            self._handles[h.id] = h
            self.ports.reserve(h.ports)

    def _open_log(self, node_id: str) -> int:
        ensure_private_dir(self.log_dir)
        path = self.log_path(node_id)
        try:
            if path.stat().st_size > self.log_cap_bytes:
                os.replace(path, path.with_name(path.name + ".1"))
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.write(fd, f"--- cadre-desktop: starting node {node_id} at {stamp} ---\n".encode())
        return fd

    def start(
        self,
        node_id: str,
        attempt: int,
        secret_env: Mapping[str, str],
        *,
        want_ports: tuple[int, int] | None = None,
        avoid_ports: Iterable[int] = (),
    ) -> Handle:
        """The driver seam's start: a live child that this same attempt made is adopted.

        A host that died after starting a child and before its record named it
        comes back to find that child running (state.json, or the scan for
        untracked children); starting the same attempt again returns it rather
        than a second child on the same ports and folder.
        """
        for handle in self.handles_for(node_id):
            if handle.alive and attempt > 0 and handle.attempt == attempt:
                handle.adopted = True
                return handle
        return self.spawn(node_id, secret_env, want_ports=want_ports, avoid_ports=avoid_ports, attempt=attempt)

    def spawn(
        self,
        node_id: str,
        secret_env: Mapping[str, str],
        *,
        want_ports: tuple[int, int] | None = None,
        avoid_ports: Iterable[int] = (),
        attempt: int = 0,
    ) -> Handle:
        """Start the node program for `node_id` and return its live handle.

        Synchronous from the first change to the last on purpose: the previous
        handle of the node is dropped (its ports released) before the launch,
        and put back exactly as it was if the launch fails. Restoring is sound
        only because nothing else can run in between; do not add an await here.
        """
        if self._closed:
            raise SpawnError("the host is shutting down")
        dropped = self._drop_stale(node_id)
        try:
            api_port, p2p_port = self._choose_ports(want_ports, avoid_ports)
        except Exception:
            self._restore(dropped)
            raise
        try:
            work = self.work_dir(node_id)
            ensure_private_dir(work)
            env = self._node_env(node_id, (api_port, p2p_port), secret_env, attempt)
            log_fd = self._open_log(node_id)
            try:
                popen = subprocess.Popen(
                    self.node_command,
                    env=env,
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=log_fd,
                    close_fds=True,
                    **procs.popen_options(self.platform),
                )
            finally:
                os.close(log_fd)
        except OSError as exc:
            self.ports.release((api_port, p2p_port))
            self._restore(dropped)
            raise SpawnError(
                f"could not start the node program {self.node_command[0]!r}: {exc.strerror or exc}. "
                "Check 'node_command' in settings.json."
            ) from None
        except BaseException:
            self.ports.release((api_port, p2p_port))
            self._restore(dropped)
            raise
        # From here on nothing may throw: the child exists and must be tracked.
        identity = procs.read_identity(popen.pid, self.platform) or procs.Identity("unknown")
        handle = Handle(
            id=f"{node_id}.{uuid.uuid4().hex[:8]}",
            node_id=node_id,
            pid=popen.pid,
            identity=identity,
            api_port=api_port,
            p2p_port=p2p_port,
            started_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            advertise_host=env["CADRE_ADVERTISE_HOST"],
            attempt=attempt,
            popen=popen,
        )
        self._handles[handle.id] = handle
        for old in dropped:
            if old._cancel_watch:
                old._cancel_watch()
        try:
            handle._cancel_watch = procs.watch_exit(
                asyncio.get_running_loop(), popen.pid, popen, lambda code: self._on_exit(handle, code)
            )
        except Exception as exc:
            log.error("node %s: cannot watch its child for exits: %s", node_id, exc)
        try:
            self._persist()
        except StorageError as exc:
            log.error("node %s: %s", node_id, exc.message)
        return handle

    # -- exits and stops -----------------------------------------------------------

    def _on_exit(self, handle: Handle, code: int | None) -> None:
        if not handle.alive:
            return
        handle.alive = False
        handle.returncode = code
        handle._exited.set()
        event = ExitEvent(handle.id, handle.node_id, handle.pid, code, handle.stop_requested)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("exit listener failed")
        if self._handles.get(handle.id) is handle and not self._closed:
            self._persist_soon()

    def _persist_soon(self) -> None:
        """Drop a dead handle from state.json after the exit's listeners had their turn.

        An exit is what starts a respawn, and the respawn rewrites state.json
        anyway (with the new child); writing it here first would put an fsync
        pair between the exit and the new child for nothing. Deferring is safe:
        until the write, the file names a child that is gone, and `init` checks
        every row against the live process (pid and start time) and drops dead
        ones, so a host that dies in between loses nothing.
        """
        self._persist_pending = True
        if self._persist_scheduled:
            return
        self._persist_scheduled = True
        asyncio.get_running_loop().call_soon(self._flush_pending)

    def _flush_pending(self) -> None:
        self._persist_scheduled = False
        if not self._persist_pending or self._closed:
            return
        try:
            self._persist()
        except StorageError as exc:
            log.error("%s", exc.message)

    def _same_process(self, handle: Handle) -> bool:
        return handle.identity.matches(procs.read_identity(handle.pid, self.platform))

    async def stop(self, handle_id: str | None) -> None:
        """Terminate the child's group, wait the grace period, then kill it."""
        handle = self.get(handle_id)
        if handle is None or not handle.alive:
            return
        handle.stop_requested = True
        if not self._same_process(handle):
            # The pid is gone or belongs to someone else now: never signal it.
            self._on_exit(handle, None)
            return
        procs.terminate_group(handle.pid, self.platform)
        try:
            await asyncio.wait_for(handle._exited.wait(), self.stop_timeout_s)
            return
        except asyncio.TimeoutError:
            pass
        log.warning("node %s did not stop within %.1fs; killing it", handle.node_id, self.stop_timeout_s)
        if self._same_process(handle):
            procs.kill_group(handle.pid, self.platform)
        try:
            await asyncio.wait_for(handle._exited.wait(), 5.0)
        except asyncio.TimeoutError:
            self._on_exit(handle, None)

    async def stop_node(self, node_id: str) -> None:
        for handle in self.handles_for(node_id):
            await self.stop(handle.id)

    async def remove_node(self, node_id: str) -> None:
        """Stop every child of the node, forget its handles, delete its work folder and log."""
        await self.stop_node(node_id)
        for handle in self._drop_stale(node_id):
            if handle._cancel_watch:
                handle._cancel_watch()
        self._persist()
        await asyncio.to_thread(self._delete_files, node_id)

    def _delete_files(self, node_id: str) -> None:
        """Delete the work folder and logs; a folder that survives is an error, never a success."""
        work = self.work_dir(node_id)
        failures: list[str] = []
        shutil.rmtree(work, onerror=lambda _fn, path, exc: failures.append(f"{path}: {exc[1]}"))
        for path in (self.log_path(node_id), self.log_path(node_id).with_name(f"node-{node_id}.log.1")):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete the log %s: %s", path, exc)
        if os.path.lexists(work):
            detail = failures[0] if failures else "it is still there"
            raise StorageError(f"could not delete the work folder of node {node_id} ({detail}); "
                               "the removal is retried later")

    def forget(self, handle_id: str) -> None:
        """Drop a dead handle (its ports go back)."""
        handle = self._handles.pop(handle_id, None)
        if handle is not None:
            self.ports.release(handle.ports)
            if handle._cancel_watch:
                handle._cancel_watch()

    async def stop_all(self) -> None:
        """Stop every child (a clean quit), and write down which were stopped on purpose,
        so the next host starts them again without counting a failed attempt."""
        live = [h for h in self._handles.values() if h.alive]
        await asyncio.gather(*(self.stop(h.id) for h in live))
        try:
            self._persist(stopped_cleanly=[h.node_id for h in live])
        except StorageError as exc:
            log.error("%s", exc.message)

    def log_tail(self, node_id: str, lines: int = 20, max_bytes: int = 16384) -> list[str]:
        """The last lines of the node's log (a bounded read from the end)."""
        path = self.log_path(node_id)
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                data = fh.read()
        except OSError:
            return []
        text = data.decode("utf-8", "replace").splitlines()
        if size > max_bytes and text:
            text = text[1:]  # the first line is probably cut
        return [line for line in text if not line.startswith("--- cadre-desktop:")][-lines:]

    def trim_logs(self) -> None:
        """Keep each node's log under its cap: the old part moves to `.1`."""
        for handle in self._handles.values():
            path = self.log_path(handle.node_id)
            try:
                if path.stat().st_size <= self.log_cap_bytes:
                    continue
                shutil.copyfile(path, path.with_name(path.name + ".1"))
                # The child appends with O_APPEND, so it carries on at the new end.
                with open(path, "r+b") as fh:
                    fh.truncate(0)
            except OSError:
                continue

    def close(self) -> None:
        """Stop watching; children keep running (a restarted host re-attaches)."""
        self._closed = True
        if self._persist_pending:
            try:
                self._persist()
            except StorageError as exc:
                log.error("%s", exc.message)
        for handle in self._handles.values():
            if handle._cancel_watch:
                handle._cancel_watch()
                handle._cancel_watch = None
        self._listeners.clear()

