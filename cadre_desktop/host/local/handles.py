"""Handles: the orchestrator's rows for spawned children, and state.json.

A handle names one child by its pid *and* its process start time (and boot id
on Linux), so a pid the OS has since given to another program is never taken
for our child. It also names what the child may leave behind: its process
group (POSIX; the session the child leads has the same id), its Job object
(Windows), and the log pump that writes its output when it has one (Windows,
or a child an older build started; the home's log keeper writes the others). Live handles persist in
`state.json` (0600, versioned); nothing of a child's environment is ever
written there.

Version 2 added `pgid`, `job` and `pump`. A version-1 row gets `pgid` = its
pid, which is what every version-1 host started (a session of its own).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cadre_desktop.errors import StorageError
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.core.driver import Exit
from cadre_desktop.host.core.records.jsondoc import read_versioned
from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.linux import Adopted
from cadre_desktop.jsontypes import JSONObject

log = logging.getLogger(__name__)

STATE_VERSION = 2


def _upgrade_1_to_2(doc: JSONObject) -> JSONObject:
    rows = doc.get("handles")
    if isinstance(rows, dict):
        for row in rows.values():
            if isinstance(row, dict) and "pgid" not in row:
                row["pgid"] = row.get("pid")
    return doc


STATE_UPGRADES = {1: _upgrade_1_to_2}


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
    #: The start number that made this child (the driver seam keys starts by it).
    attempt: int = 0
    #: True when a start found this child already running and took it over.
    adopted: bool = False
    alive: bool = True
    #: Ended, its exit not told yet: its last output may still be on its way to its log.
    exit_pending: bool = False
    stop_requested: bool = False
    returncode: int | None = None
    #: The process group (and session) the child leads on POSIX; it outlives a dead leader.
    pgid: int | None = None
    #: The name of the child's Job object on Windows.
    job: str | None = None
    #: The log pump writing the child's output, if one was started.
    pump_pid: int | None = None
    pump_identity: procs.Identity | None = None
    #: The home's log keeper writes its output (not persisted: a restarted host asks the keeper).
    log_kept: bool = False
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _cancel_watch: Callable[[], None] | None = field(default=None, repr=False)
    _exited: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _job_handle: object | None = field(default=None, repr=False)
    _cancel_pump_watch: Callable[[], None] | None = field(default=None, repr=False)
    #: Set once whoever writes its log (its pump, or the keeper) wrote its last output.
    _log_done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def ports(self) -> tuple[int, int]:
        return (self.api_port, self.p2p_port)

    @property
    def forked(self) -> bool:
        """Forked from a loaded node program (a fork server), not started from scratch."""
        return isinstance(self.popen, Adopted)

    def to_row(self) -> JSONObject:
        return {
            "node_id": self.node_id,
            "pid": self.pid,
            "start_time": self.identity.start_time,
            "boot_id": self.identity.boot_id,
            "api_port": self.api_port,
            "p2p_port": self.p2p_port,
            "started_at": self.started_at,
            "advertise_host": self.advertise_host,
            "attempt": self.attempt,
            "pgid": self.pgid,
            "job": self.job,
            "pump": ({"pid": self.pump_pid, "start_time": self.pump_identity.start_time,
                      "boot_id": self.pump_identity.boot_id}
                     if self.pump_pid and self.pump_identity else None),
        }


#: The exit a driver reports (kept under its old name for the orchestrator's callers).
ExitEvent = Exit


ExitListener = Callable[[ExitEvent], None]


def handle_from_row(handle_id: str, row: object) -> Handle:
    if not isinstance(row, dict):
        raise ValueError(f"handle {handle_id!r} is not an object")
    ints = ("pid", "api_port", "p2p_port")
    if not all(isinstance(row.get(k), int) and not isinstance(row.get(k), bool) for k in ints):
        raise ValueError(f"handle {handle_id!r} needs whole-number pid and ports")
    if not isinstance(row.get("node_id"), str) or not isinstance(row.get("start_time"), str):
        raise ValueError(f"handle {handle_id!r} needs node_id and start_time")
    boot = row.get("boot_id")
    pgid = row.get("pgid")
    if pgid is not None and (not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 0):
        raise ValueError(f"handle {handle_id!r} has a bad pgid")
    job = row.get("job")
    if job is not None and (not isinstance(job, str) or len(job) > 200):
        raise ValueError(f"handle {handle_id!r} has a bad job name")
    pump = row.get("pump")
    pump_pid, pump_identity = None, None
    if pump is not None:
        if (not isinstance(pump, dict) or not isinstance(pump.get("pid"), int) or isinstance(pump.get("pid"), bool)
                or not isinstance(pump.get("start_time"), str)):
            raise ValueError(f"handle {handle_id!r} has a bad pump")
        pump_boot = pump.get("boot_id")
        pump_pid = pump["pid"]
        pump_identity = procs.Identity(pump["start_time"], pump_boot if isinstance(pump_boot, str) else None)
    return Handle(
        id=handle_id,
        node_id=row["node_id"],
        pid=row["pid"],
        identity=procs.Identity(row["start_time"], boot if isinstance(boot, str) else None),
        api_port=row["api_port"],
        p2p_port=row["p2p_port"],
        started_at=str(row.get("started_at", "")),
        advertise_host=str(row.get("advertise_host") or ""),
        attempt=whole(row.get("attempt")),
        pgid=pgid,
        job=job,
        pump_pid=pump_pid,
        pump_identity=pump_identity,
    )


def whole(value: object) -> int:
    """A non-negative whole number, or 0 for anything else (older files have no attempt)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def read_state(path: Path) -> tuple[dict[str, Handle], frozenset[str]]:
    """The persisted handles, and the nodes the last host stopped on a clean quit."""
    doc, _ = read_versioned(path, what="state", current=STATE_VERSION, upgrades=STATE_UPGRADES)
    if doc is None:
        return {}, frozenset()
    stopped = doc.get("stopped_cleanly", [])
    if not isinstance(stopped, list) or not all(isinstance(n, str) for n in stopped):
        raise StorageError(f"the state file {path} has a bad 'stopped_cleanly' list; it was left as it is")
    rows = doc.get("handles")
    if not isinstance(rows, dict):
        raise StorageError(f"the state file {path} has no 'handles' object; it was left as it is")
    try:
        return {hid: handle_from_row(hid, row) for hid, row in rows.items()}, frozenset(n for n in stopped if isinstance(n, str))
    except ValueError as exc:
        raise StorageError(f"the state file {path} has a bad row: {exc}; it was left as it is") from None


def state_doc(handles: Iterable[Handle], stopped_cleanly: Iterable[str] = ()) -> JSONObject:
    doc: JSONObject = {"version": STATE_VERSION, "handles": {h.id: h.to_row() for h in handles if h.alive}}
    if stopped_cleanly:
        doc["stopped_cleanly"] = [*sorted(set(stopped_cleanly))]  # [*...]: a JSON list (sorted gives list[str])
    return doc


def write_state(path: Path, handles: Iterable[Handle], stopped_cleanly: Iterable[str] = ()) -> None:
    write_state_doc(path, state_doc(handles, stopped_cleanly))


def write_state_doc(path: Path, doc: JSONObject) -> None:
    try:
        write_json_atomic(path, doc, compact=True)
    except OSError as exc:
        raise StorageError(f"could not save the state file {path}: {exc.strerror or exc}") from None


class StateFile:
    """`state.json` for one driver's handles: written at once, or soon after an exit.

    An exit is what starts a respawn, and the respawn rewrites the file anyway (with
    the new child); writing it at the exit first would put an fsync pair between the
    exit and the new child for nothing. Deferring is safe: until the write, the file
    names a child that is gone, and `Orchestrator.init` checks every row against the
    live process (pid and start time) and drops dead ones, so a host that dies in
    between loses nothing.
    """

    def __init__(self, path: Path, handles: Mapping[str, Handle]) -> None:
        self.path = path
        self._handles = handles
        #: Why the last write failed (None once one succeeds): shown with the views.
        self.save_error: str | None = None
        #: An exit left the file naming a dead child.
        self.pending = False
        self._scheduled = False
        #: The host's writer thread (None: written on the caller's thread, as in unit tests).
        self.writer: GroupWriter | None = None

    def write(self, stopped_cleanly: Iterable[str] = ()) -> None:
        """Write now and wait for its sync (on the writer's thread when there is one, behind
        the writes asked before it, so the file never goes back to an older state)."""
        self.pending = False
        handles, stopped = list(self._handles.values()), list(stopped_cleanly)
        try:
            if self.writer is None:
                write_state(self.path, handles, stopped)
            else:  # the loop waits for it: the handles cannot change meanwhile
                self.writer.write_now(self.path, lambda: write_state(self.path, handles, stopped))
        except StorageError as exc:
            self.save_error = exc.message
            raise
        self.save_error = None

    def write_behind(self) -> None:
        """The write after a spawn: on the writer's thread, the loop not waiting for it.

        Safe for the same reason as `write_soon`: until it is synced, a host that dies
        finds the new child in its census of the process table (`reclaim_untracked`)
        and tracks it again. Without a writer it is `write_or_log`.
        """
        if self.writer is None:
            self.write_or_log()
            return
        self.pending = False
        doc = state_doc(self._handles.values())
        path = self.path
        self.writer.submit_then(path, lambda: write_state_doc(path, doc), self._written)

    def _written(self, error: BaseException | None) -> None:
        if error is None:
            self.save_error = None
            return
        message = error.message if isinstance(error, StorageError) else f"could not save {self.path}: {error}"
        if self.save_error is None:
            log.error("%s", message)
        self.save_error = message

    def write_or_log(self, stopped_cleanly: Iterable[str] = ()) -> None:
        """`write` where nothing can be done about a failure but say it (`save_error` keeps it)."""
        try:
            self.write(stopped_cleanly)
        except StorageError as exc:
            log.error("%s", exc.message)

    def write_soon(self, still_wanted: Callable[[], bool]) -> None:
        """Write on a later loop turn, once, if `still_wanted()` then."""
        self.pending = True
        if self._scheduled:
            return
        self._scheduled = True

        def flush() -> None:
            self._scheduled = False
            if self.pending and still_wanted():
                self.write_or_log()

        asyncio.get_running_loop().call_soon(flush)
