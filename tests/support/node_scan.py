"""What is really running for a home, read from the OS, and the invariant it must meet.

Node processes are found by their environment (`CADRE_NODE_DIR` under the
home's `nodes/`), not by what the host says, so a child the host lost track of
is found too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cadre_desktop.host.local.proctree import node_environment

#: Hosted nodes' supervised statuses, and lent nodes' (`provisioning` has its child too).
SUPERVISED = {"unclaimed", "joining", "joined", "awaiting_seed", "seeded", "provisioning"}


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def node_processes(home: Path) -> dict[str, list[psutil.Process]]:
    """node id -> live (non-zombie) processes started for it under `home`."""
    prefix = str(home / "nodes") + "/"
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        env = node_environment(proc.pid)  # a node born of a standby names itself by its folder
        if not env:
            continue
        node_dir = env.get("CADRE_NODE_DIR", "")
        if node_dir.startswith(prefix) and _alive(proc):
            found.setdefault(env.get("CADRE_NODE_ID", node_dir[len(prefix):]), []).append(proc)
    return found


def keeper_processes(home: Path) -> list[psutil.Process]:
    """The home's log keeper (it outlives its host as the nodes do), found by the logs folder it writes."""
    logs = str(home / "logs")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if any(part.endswith("logkeeper.py") for part in cmdline) and logs in cmdline:
            found.append(proc)
    return found


def kill_node_processes(home: Path) -> list[int]:
    """SIGKILL whatever still runs for `home`, its log keeper too (test teardown); returns the pids."""
    pids = []
    for procs in [*node_processes(home).values(), keeper_processes(home)]:
        for proc in procs:
            try:
                proc.kill()
                pids.append(proc.pid)
            except psutil.Error:
                pass
    return pids


def listening_ports(proc: psutil.Process) -> set[int]:
    try:
        conns = proc.net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None


@dataclass
class Snapshot:
    records: dict[str, dict]
    handles: dict[str, dict]
    procs: dict[str, list[psutil.Process]]
    problems: list[str] = field(default_factory=list)

    @property
    def untracked(self) -> list[psutil.Process]:
        """Node processes that state.json does not name: no host can ever find them again."""
        pids = {row["pid"] for row in self.handles.values()}
        return [p for children in self.procs.values() for p in children if p.pid not in pids]


def check_invariant(home: Path, *, host_up: bool = True) -> Snapshot:
    """The settled state of a home, and every way it breaks the supervision invariant.

    - every supervised record has exactly one live child, and it is the handle
      the record names in `state.json` (same pid);
    - a record that is not supervised (`error`) has no child; no record is
      left half-created or half-removed;
    - no child runs for a node no record names;
    - every port a node process listens on is a port of its own live handle,
      and no two handles share a port.
    """
    records = dict((read_json(home / "hosted-nodes.json") or {"nodes": {}})["nodes"])
    records.update((read_json(home / "donations.json") or {"donations": {}})["donations"])  # lent nodes
    handles = (read_json(home / "state.json") or {"handles": {}})["handles"]
    procs = node_processes(home)
    snap = Snapshot(records, handles, procs)
    problems = snap.problems
    for node_id, rec in records.items():
        children = procs.get(node_id, [])
        status = rec["status"]
        if status in SUPERVISED:
            if len(children) != 1:
                problems.append(f"{node_id} ({status}) has {len(children)} live children "
                                f"{[p.pid for p in children]}")
                continue
            row = handles.get(rec.get("handle") or "")
            if row is None:
                problems.append(f"{node_id}: its handle {rec.get('handle')} is not in state.json")
            elif row["pid"] != children[0].pid:
                problems.append(f"{node_id}: state.json says pid {row['pid']}, the child is {children[0].pid}")
        elif status == "error":
            if children:
                problems.append(f"{node_id} is in error but has children {[p.pid for p in children]}")
        else:
            problems.append(f"{node_id} is left {status!r}")
    for node_id, children in procs.items():
        if node_id not in records:
            problems.append(f"orphan child(ren) {[p.pid for p in children]} for node {node_id} with no record")
    named = {rec.get("handle") for rec in records.values() if rec["status"] in SUPERVISED}
    for hid, row in handles.items():
        if hid not in named:
            problems.append(f"state.json keeps handle {hid} (pid {row['pid']}) that no supervised record names")
    owner: dict[int, str] = {}
    for hid, row in handles.items():
        for port in (row["api_port"], row["p2p_port"]):
            if port in owner:
                problems.append(f"port {port} is in handles {owner[port]} and {hid}")
            owner[port] = hid
    by_pid = {row["pid"]: (hid, {row["api_port"], row["p2p_port"]}) for hid, row in handles.items()}
    for node_id, children in procs.items():
        for proc in children:
            ports = listening_ports(proc)
            hid, allowed = by_pid.get(proc.pid, (None, set()))
            if ports - allowed:
                problems.append(f"node {node_id} pid {proc.pid} listens on {sorted(ports - allowed)}, "
                                f"not the ports of a live handle ({hid})")
    return snap


def wait_settled(home: Path, tracked: set[int], timeout: float = 30) -> Snapshot:
    """Poll until `home` meets the invariant (`check_invariant`); return that snapshot.

    `tracked` collects every pid some state.json ever named. A node process no
    record can account for (a second child, an orphan, a child of a node in
    error) is one of the invariant's problems, so it keeps this from settling:
    it is reported in the failure, never ended here.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        snap = check_invariant(home)
        tracked.update(row["pid"] for row in snap.handles.values())
        if not snap.problems:
            return snap
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled after {timeout}s: {snap.problems}")
        time.sleep(0.1)
