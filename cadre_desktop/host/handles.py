"""Handles: the orchestrator's rows for spawned children, and state.json.

A handle names one child by its pid *and* its process start time (and boot id
on Linux), so a pid the OS has since given to another program is never taken
for our child. Live handles persist in `state.json` (0600, versioned); nothing
of a child's environment is ever written there.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

import psutil

from cadre_desktop.atomicfile import write_json_atomic
from cadre_desktop.errors import StorageError
from cadre_desktop.host import procs
from cadre_desktop.host.driver import Exit
from cadre_desktop.host.jsondoc import read_versioned

STATE_VERSION = 1


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
            "attempt": self.attempt,
        }


#: The exit a driver reports (kept under its old name for the orchestrator's callers).
ExitEvent = Exit


@dataclass
class InitReport:
    attached: list[Handle]
    dead: list[str]
    #: Nodes the last host stopped on a clean quit: starting them again is no failed attempt.
    stopped_cleanly: frozenset[str] = frozenset()


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
    return Handle(
        id=handle_id,
        node_id=row["node_id"],
        pid=row["pid"],
        identity=procs.Identity(row["start_time"], boot if isinstance(boot, str) else None),
        api_port=row["api_port"],
        p2p_port=row["p2p_port"],
        started_at=str(row.get("started_at", "")),
        advertise_host=str(row.get("advertise_host") or ""),
        attempt=_whole(row.get("attempt")),
    )


def _whole(value: object) -> int:
    """A non-negative whole number, or 0 for anything else (older files have no attempt)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0



def read_state(path: Path) -> tuple[dict[str, Handle], frozenset[str]]:
    """The persisted handles, and the nodes the last host stopped on a clean quit."""
    doc, _ = read_versioned(path, what="state", current=STATE_VERSION, upgrades={})
    if doc is None:
        return {}, frozenset()
    stopped = doc.get("stopped_cleanly", [])
    if not isinstance(stopped, list) or not all(isinstance(n, str) for n in stopped):
        raise StorageError(f"the state file {path} has a bad 'stopped_cleanly' list; it was left as it is")
    rows = doc.get("handles")
    if not isinstance(rows, dict):
        raise StorageError(f"the state file {path} has no 'handles' object; it was left as it is")
    try:
        return {hid: handle_from_row(hid, row) for hid, row in rows.items()}, frozenset(stopped)
    except ValueError as exc:
        raise StorageError(f"the state file {path} has a bad row: {exc}; it was left as it is") from None


def write_state(path: Path, handles: Iterable[Handle], stopped_cleanly: Iterable[str] = ()) -> None:
    doc: dict = {"version": STATE_VERSION, "handles": {h.id: h.to_row() for h in handles if h.alive}}
    if stopped_cleanly:
        doc["stopped_cleanly"] = sorted(set(stopped_cleanly))
    try:
        write_json_atomic(path, doc)
    except OSError as exc:
        raise StorageError(f"could not save the state file {path}: {exc.strerror or exc}") from None


def find_untracked_children(nodes_dir: Path, tracked: set[int], platform: str) -> list[Handle]:
    """Children an earlier host started but died before writing to state.json.

    A host killed between the spawn and the state write leaves a child that
    nothing names, holding its node's ports and folder, so every respawn of
    that node would fail. Every child runs with `CADRE_NODE_DIR` under our
    nodes folder, which finds them: one scan of the process table at start,
    no extra write on the spawn path. Such a child is tracked again (its
    record takes it, or the reap of a half-created node stops it).
    """
    root = str(nodes_dir) + os.sep
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
        if os.path.dirname(node_dir) != str(nodes_dir):
            continue
        identity = procs.read_identity(proc.pid, platform)
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
            attempt=_whole(int(env["CADRE_START_ATTEMPT"]) if env.get("CADRE_START_ATTEMPT", "").isdigit() else 0),
        ))
    return found
