"""Everything a node started, not only the process the host tracks.

The host tracks a node's *leader* (the process it spawned) by pid and start
time. A node program may start more processes (a wrapper script around the
real node, helpers), and those can outlive the leader: a SIGKILLed wrapper
leaves the real node running, holding its work folder's lock and ports, so
every respawn would fail. This module finds what a node left behind:

- its **process group** (POSIX): every child starts a session of its own, so
  its group and session id is the leader's pid. While any member is alive the
  OS never hands that id to a new process, so a group that still exists right
  after its leader's exit is ours;
- every process whose **environment** names one of this home's nodes
  (`CADRE_NODE_ID`, and `CADRE_NODE_DIR` under our `nodes/`): the node program
  needs these to run, so it and everything it starts carry them. This finds
  a process that left the group (`setsid`), and checks members before the host
  signals a group whose leader died while no host was watching;
- the holder of the work folder's **lock** (`node.lock`, see
  `cadre_desktop.node.node_dir`), read from /proc/locks on Linux or from the
  pid the reference node writes into the file.

Reading the process table and environments costs a few milliseconds per
hundred processes, so the full census runs only at start-up, remove and quit,
in a worker thread; a respawn looks only at the lock (three syscalls).
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil

from cadre_desktop.host.local.handles import Handle, whole
from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.seam import ProcessOS

log = logging.getLogger(__name__)

#: The reference node's lock file in its work folder (cadre_desktop/node/node_dir.py).
LOCK_FILE = "node.lock"


@dataclass(frozen=True)
class Member:
    """A live process that runs for one of this home's nodes."""

    info: procs.ProcInfo
    node_id: str

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def leads(self) -> bool:
        """A session leader: how every host starts a node's first process."""
        return self.info.pid == self.info.pgid == self.info.sid


def names_node(env: dict[str, str], nodes_dir: Path, node_id: str | None = None) -> str | None:
    """The node id the environment says it runs for under `nodes_dir`, or None."""
    node_dir, found = env.get("CADRE_NODE_DIR", ""), env.get("CADRE_NODE_ID", "")
    if not found or os.path.basename(node_dir) != found or os.path.dirname(node_dir) != str(nodes_dir):
        return None
    if node_id is not None and found != node_id:
        return None
    return found


def node_environment(pid: int) -> dict[str, str]:
    """The environment a process was started with, completed for a node born of a standby.

    A standby learns its node's variables on a pipe after exec, so its
    environment as the OS shows it names no node; once told, it moves into its
    work folder (node contract, "Standby"), and that folder names the node.
    """
    env = procs.environment(pid)
    if env.get("CADRE_STANDBY") == "1" and "CADRE_NODE_ID" not in env:
        try:
            cwd = psutil.Process(pid).cwd()
        except (psutil.Error, OSError):
            return env
        env = {**env, "CADRE_NODE_DIR": cwd, "CADRE_NODE_ID": os.path.basename(cwd)}
    return env


def members(nodes_dir: Path, system: ProcessOS, node_id: str | None = None) -> list[Member]:
    """Every live process whose environment names a node of this home (or node `node_id`)."""
    table = system.process_table()
    me = os.getpid()
    found = []
    for info in table:
        if info.pid == me:
            continue
        owner = names_node(node_environment(info.pid), nodes_dir, node_id)
        if owner is not None:
            found.append(Member(info, owner))
    return found


@dataclass
class Census:
    """The node processes of a home, sorted against the leaders the host tracks."""

    #: Session leaders that no handle names: children an earlier host started and lost track of.
    untracked: list[Member] = field(default_factory=list)
    #: Processes of a node that belong to no tracked leader's group: what a dead leader left.
    leftovers: list[Member] = field(default_factory=list)


def take_census(nodes_dir: Path, tracked: dict[int, str], system: ProcessOS) -> Census:
    """Sort every node process of the home.

    `tracked` maps each live tracked leader's group id (its pid on Windows) to
    its node. A process in such a group or session (where there are no groups, below
    such a leader in the tree of parents) is part of that leader. A
    session leader no handle names is adopted as untracked, at most one per
    node and only for a node with no tracked leader; every other process is a
    leftover.
    """
    census = Census()
    claimed = set(tracked.values())
    found = members(nodes_dir, system)
    by_pid = {m.pid: m for m in found}
    for member in sorted(found, key=_started):
        info = member.info
        if not system.groups:
            if info.pid in tracked or _has_tracked_ancestor(info.pid, tracked, by_pid):
                continue
            leads = info.pgid not in by_pid  # its parent does not run for a node
        else:
            if tracked.get(info.pgid) == member.node_id or tracked.get(info.sid) == member.node_id:
                continue
            leads = member.leads
        if leads and member.node_id not in claimed:
            claimed.add(member.node_id)
            census.untracked.append(member)
        else:
            census.leftovers.append(member)
    return census


def handle_for(member: Member, system: ProcessOS) -> Handle | None:
    """A handle for an untracked child, from what its environment says (None if it says too little)."""
    env = procs.environment(member.pid)
    try:
        ports = int(env["CADRE_API_PORT"]), int(env["CADRE_P2P_PORT"])
        started = datetime.fromtimestamp(psutil.Process(member.pid).create_time(), UTC)
    except (KeyError, ValueError, psutil.Error):
        return None
    return Handle(
        id=f"{member.node_id}.{secrets.token_hex(4)}", node_id=member.node_id, pid=member.pid,
        identity=member.info.identity, api_port=ports[0], p2p_port=ports[1],
        started_at=started.isoformat(timespec="milliseconds"),
        advertise_host=env.get("CADRE_ADVERTISE_HOST", ""),
        attempt=whole(int(env["CADRE_START_ATTEMPT"]) if env.get("CADRE_START_ATTEMPT", "").isdigit() else 0),
        pgid=member.info.pgid if system.groups else None,
    )


def _started(member: Member) -> float:
    try:
        return float(member.info.identity.start_time)
    except ValueError:
        return 0.0


def _has_tracked_ancestor(pid: int, tracked: dict[int, str], by_pid: dict[int, Member]) -> bool:
    seen = set()
    member = by_pid.get(pid)
    while member is not None and member.info.pgid not in seen:
        parent = member.info.pgid
        if parent in tracked:
            return True
        seen.add(parent)
        member = by_pid.get(parent)
    return False


def group_leftovers(pgid: int, leader: procs.Identity, node_id: str, nodes_dir: Path,
                    system: ProcessOS) -> list[int]:
    """Live processes of a node's group or session after its leader died, checked to be ours.

    If the leader's pid is now another process, the id was free at some
    point, so nothing of ours can still be in that group: nothing is returned.
    Otherwise every member must carry the node's environment.
    """
    if not system.groups or not pgid:
        return []
    now = system.read_identity(pgid)
    if now is not None and not leader.matches(now):
        return []
    return [m.pid for m in members(nodes_dir, system, node_id)
            if m.info.pgid == pgid or m.info.sid == pgid]


def lock_holder(node_dir: Path, node_id: str, system: ProcessOS) -> int | None:
    """The pid of a process of this node that holds its work folder's lock, if any.

    The lock is tested with a shared lock taken and dropped at once, which
    fails while anyone holds it exclusively. Windows has no such lock (no fcntl): None.
    """
    try:
        import fcntl
    except ImportError:
        return None
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(node_dir / LOCK_FILE, flags)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            pass  # held
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        st = os.fstat(fd)
        try:
            written = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            written = ""
    finally:
        os.close(fd)
    candidates = system.lock_pids(st)
    if candidates is None:
        return None
    if written.isdigit():
        candidates.append(int(written))
    for pid in candidates:
        if pid != os.getpid() and names_node(node_environment(pid), node_dir.parent, node_id):
            return pid
    return None
