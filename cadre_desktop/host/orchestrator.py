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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping

import psutil

from cadre_desktop.atomicfile import ensure_private_dir, write_json_atomic
from cadre_desktop.errors import SpawnError, StorageError
from cadre_desktop.host import procs
from cadre_desktop.host.jsondoc import read_versioned
from cadre_desktop.host.ports import PortAllocator

log = logging.getLogger(__name__)

STATE_VERSION = 1
LOG_CAP_BYTES = 1 << 20
#: Variables the host sets for the child; inherited copies are dropped first.
_NODE_VARS_PREFIX = "CADRE_"


@dataclass
class Handle:
    id: str
    node_id: str
    pid: int
    identity: procs.Identity
    api_port: int
    p2p_port: int
    started_at: str
    #: The address the child was told to advertise (it learns it only at start).
    advertise_host: str = ""
    alive: bool = True
    stop_requested: bool = False
    returncode: int | None = None
    popen: subprocess.Popen | None = field(default=None, repr=False)
    _cancel_watch: Callable[[], None] | None = field(default=None, repr=False)
    _exited: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def ports(self) -> tuple[int, int]:
        return (self.api_port, self.p2p_port)

    def to_row(self) -> dict:
        return {
            "node_id": self.node_id,
            "pid": self.pid,
            "start_time": self.identity.start_time,
            "boot_id": self.identity.boot_id,
            "api_port": self.api_port,
            "p2p_port": self.p2p_port,
            "started_at": self.started_at,
            "advertise_host": self.advertise_host,
        }


@dataclass(frozen=True)
class ExitEvent:
    handle_id: str
    node_id: str
    pid: int
    returncode: int | None
    #: True when the exit followed a stop this host asked for.
    requested: bool


@dataclass
class InitReport:
    attached: list[Handle]
    dead: list[str]
    #: Nodes the last host stopped on a clean quit: starting them again is no failed attempt.
    stopped_cleanly: frozenset[str] = frozenset()


ExitListener = Callable[[ExitEvent], None]


def _handle_from_row(handle_id: str, row: object) -> Handle:
    if not isinstance(row, dict):
        raise ValueError(f"handle {handle_id!r} is not an object")
    ints = ("pid", "api_port", "p2p_port")
    if not all(isinstance(row.get(k), int) and not isinstance(row.get(k), bool) for k in ints):
        raise ValueError(f"handle {handle_id!r} needs whole-number pid and ports")
    if not isinstance(row.get("node_id"), str) or not isinstance(row.get("start_time"), str):
        raise ValueError(f"handle {handle_id!r} needs node_id and start_time")
    boot = row.get("boot_id")
    return Handle(
        id=handle_id,
        node_id=row["node_id"],
        pid=row["pid"],
        identity=procs.Identity(row["start_time"], boot if isinstance(boot, str) else None),
        api_port=row["api_port"],
        p2p_port=row["p2p_port"],
        started_at=str(row.get("started_at", "")),
        advertise_host=str(row.get("advertise_host") or ""),
    )


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

    def _read_state(self) -> tuple[dict[str, Handle], frozenset[str]]:
        doc, _ = read_versioned(self.state_file, what="state", current=STATE_VERSION, upgrades={})
        if doc is None:
            return {}, frozenset()
        stopped = doc.get("stopped_cleanly", [])
        if not isinstance(stopped, list) or not all(isinstance(n, str) for n in stopped):
            raise StorageError(f"the state file {self.state_file} has a bad 'stopped_cleanly' list; "
                               "it was left as it is")
        return self._read_handles(doc), frozenset(stopped)

    def _read_handles(self, doc: dict) -> dict[str, Handle]:
        rows = doc.get("handles")
        if not isinstance(rows, dict):
            raise StorageError(f"the state file {self.state_file} has no 'handles' object; it was left as it is")
        try:
            return {hid: _handle_from_row(hid, row) for hid, row in rows.items()}
        except ValueError as exc:
            raise StorageError(f"the state file {self.state_file} has a bad row: {exc}; it was left as it is") from None

    async def init(self) -> InitReport:
        """Re-attach to every persisted child that is still the same process."""
        loop = asyncio.get_running_loop()
        persisted, stopped_cleanly = self._read_state()
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
        strays = await asyncio.to_thread(self._find_untracked_children)
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

    def _find_untracked_children(self) -> list[Handle]:
        """Children an earlier host started but died before writing to state.json.

        A host killed between the spawn and the state write leaves a child that
        nothing names, holding its node's ports and folder, so every respawn of
        that node would fail. Every child runs with `CADRE_NODE_DIR` under our
        nodes folder, which finds them: one scan of the process table at start,
        no extra write on the spawn path. Such a child is tracked again (its
        record takes it, or the reap of a half-created node stops it).
        """
        tracked = {h.pid for h in self._handles.values()}
        root = str(self.nodes_dir) + os.sep
        found: list[Handle] = []
        for proc in psutil.process_iter(["pid"]):
            if proc.pid in tracked or proc.pid == os.getpid():
                continue
            try:
                env = proc.environ()
            except (psutil.Error, OSError):
                continue
            node_dir, node_id = env.get("CADRE_NODE_DIR", ""), env.get("CADRE_NODE_ID", "")
            if not node_id or not node_dir.startswith(root) or os.path.basename(node_dir) != node_id:
                continue
            if os.path.dirname(node_dir) != str(self.nodes_dir):
                continue
            identity = procs.read_identity(proc.pid, self.platform)
            try:
                ports = int(env["CADRE_API_PORT"]), int(env["CADRE_P2P_PORT"])
            except (KeyError, ValueError):
                continue
            if identity is None:
                continue
            found.append(Handle(
                id=f"{node_id}.{uuid.uuid4().hex[:8]}", node_id=node_id, pid=proc.pid, identity=identity,
                api_port=ports[0], p2p_port=ports[1],
                started_at=datetime.fromtimestamp(proc.create_time(), timezone.utc).isoformat(timespec="milliseconds"),
                advertise_host=env.get("CADRE_ADVERTISE_HOST", ""),
            ))
        return found

    def _persist(self, stopped_cleanly: Iterable[str] = ()) -> None:
        self._persist_pending = False
        rows = {h.id: h.to_row() for h in self._handles.values() if h.alive}
        doc = {"version": STATE_VERSION, "handles": rows}
        if stopped_cleanly:
            doc["stopped_cleanly"] = sorted(set(stopped_cleanly))
        try:
            write_json_atomic(self.state_file, doc)
        except OSError as exc:
            raise StorageError(
                f"could not save the state file {self.state_file}: {exc.strerror or exc}"
            ) from None

    # -- spawn -----------------------------------------------------------------

    def _node_env(self, node_id: str, handle_ports: tuple[int, int], secret_env: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NODE_VARS_PREFIX)}
        env.update(
            CADRE_NODE_ID=node_id,
            CADRE_NODE_DIR=str(self.work_dir(node_id)),
            CADRE_API_HOST=self.bind_host,
            CADRE_API_PORT=str(handle_ports[0]),
            CADRE_P2P_PORT=str(handle_ports[1]),
            CADRE_ADVERTISE_HOST=self.advertise_host(),
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

    def spawn(
        self,
        node_id: str,
        secret_env: Mapping[str, str],
        *,
        want_ports: tuple[int, int] | None = None,
        avoid_ports: Iterable[int] = (),
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
            env = self._node_env(node_id, (api_port, p2p_port), secret_env)
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
        shutil.rmtree(self.work_dir(node_id), ignore_errors=True)
        for path in (self.log_path(node_id), self.log_path(node_id).with_name(f"node-{node_id}.log.1")):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

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

