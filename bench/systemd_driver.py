"""The systemd driver beside the local one and supervisord: respawn latency and idle cost per node.

    .venv/bin/python bench/systemd_driver.py [-n 15] [--nodes 5] [--idle-s 10]

Needs root and systemd installed: it starts a user manager of its own, isolated as the
tests' is (tests/support/user_manager.py: its own cgroup subtree, mount namespace, runtime
folder and session bus).

Phase 1, respawn: three supervisors run one reference node each, all at once, behind the
same `stamp` wrapper (bench/stamp.c): our headless host with the local driver (cold
starts, as the systemd driver's are), our headless host with `driver: "systemd"` (each
node a transient unit), and supervisord. Each round SIGKILLs each one's child in turn
(rotating) and measures kill -> new child started (its stamp) and kill -> answering
`GET /status`, plus a cold start with no supervisor. (bench/respawn.py's `run_phase`.)

Phase 2, idle: `--nodes` nodes under each driver, left alone `--idle-s` seconds: the
memory of each node's processes (PSS), the processes per node, the host's RSS and CPU,
and for systemd what the user manager itself costs per unit (its RSS and CPU while the
units run, against before they started).

Writes bench/results/systemd-driver.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _rig
import psutil
from _report import markdown, write_result
from _supervisors import Ours, Supervisord
from respawn import SETTLE_S, ColdStart, run_phase

from tests.support.user_manager import UserManager, unavailable


class OursUnits(Ours):
    """Our headless host with the systemd driver, on the bench's own user manager."""

    def __init__(self, *args, manager: UserManager, **kwargs) -> None:
        kwargs["settings"] = {**(kwargs.get("settings") or {}), "driver": "systemd"}
        super().__init__(*args, **kwargs)
        self.name = "cadre-desktop systemd"
        self.host.env["XDG_RUNTIME_DIR"] = str(manager.runtime)


def _local(work: Path, stamp: Path, port: int, keyring_env: dict, count: int = 1) -> Ours:
    sup = Ours(work, stamp, port, keyring_env=keyring_env, settings={"warm_standby": False}, count=count)
    sup.name = "cadre-desktop local"
    return sup


def respawn_phase(work: Path, stamp: Path, base: int, keyring_env: dict, manager: UserManager, rounds: int) -> dict:
    sups = [
        _local(work / "local", stamp, base, keyring_env),
        OursUnits(work / "systemd", stamp, base + 10, keyring_env=keyring_env, manager=manager,
                  settings={"warm_standby": False}),
        Supervisord(work / "supervisord", stamp, base + 20),
    ]
    return run_phase("respawn", sups, ColdStart(work / "cold", stamp, base + 40), rounds, SETTLE_S)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def _pss_mb(procs: list[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        try:
            total += proc.memory_full_info().pss
        except psutil.Error:
            pass
    return total / 2**20


def _cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def _node_pids(sup: Ours) -> list[int]:
    assert sup.node_id is not None
    return [n["pid"] for n in sup.host.api("GET", "/api/nodes")[1]["nodes"] if n.get("pid")]


def idle_one(sup: Ours, nodes: int, idle_s: float, manager: UserManager | None) -> dict:
    manager_before = _pss_mb(_tree(manager.proc.pid)[:1]) if manager and manager.proc else 0.0
    sup.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(_rig.status_ok(p) for p in sup.ports()):
            time.sleep(0.1)  # a benchmark's wait for its nodes, polled against a deadline
        time.sleep(2.0)  # settle: start-up work done
        node_procs = [p for pid in _node_pids(sup) for p in _tree(pid)]
        # The host's own processes (a local driver's nodes are its children: counted as nodes).
        in_nodes = {p.pid for p in node_procs}
        host = [p for p in (_tree(sup.host.proc.pid) if sup.host.proc else []) if p.pid not in in_nodes]
        watched = host + node_procs + (_tree(manager.proc.pid) if manager and manager.proc else [])
        cpu_before = {id(p): _cpu_s([p]) for p in watched}
        time.sleep(idle_s)
        # A process that ended meanwhile (a helper) counts nothing rather than minus its past.
        cpu = {id(p): max(_cpu_s([p]) - cpu_before[id(p)], 0.0) for p in watched if p.is_running()}
        manager_procs = _tree(manager.proc.pid) if manager and manager.proc else []
        out = {
            "nodes": nodes,
            "node_pss_mb_each": _pss_mb(node_procs) / nodes,
            "processes_per_node": len(node_procs) / nodes,
            "host_processes": len(host),
            "host_pss_mb": _pss_mb(host),
            "host_cpu_percent": 100 * sum(cpu.get(id(p), 0.0) for p in host) / idle_s,
            "nodes_cpu_percent_each": 100 * sum(cpu.get(id(p), 0.0) for p in node_procs) / idle_s / nodes,
        }
        if manager is not None:
            # The manager alone (its first process), against itself before this phase's units started.
            out["manager_pss_mb_per_unit"] = (_pss_mb(manager_procs[:1]) - manager_before) / nodes
            out["manager_cpu_percent"] = 100 * sum(cpu.get(id(p), 0.0) for p in manager_procs[:1]) / idle_s
        return out
    finally:
        sup.stop()


def idle_phase(work: Path, stamp: Path, base: int, keyring_env: dict, manager: UserManager, nodes: int,
               idle_s: float) -> dict:
    local = _local(work / "idle-local", stamp, base, keyring_env, count=nodes)
    units = OursUnits(work / "idle-systemd", stamp, base + 2 * nodes + 40, keyring_env=keyring_env, manager=manager,
                      settings={"warm_standby": False}, count=nodes)
    return {"local": idle_one(local, nodes, idle_s, None), "systemd": idle_one(units, nodes, idle_s, manager)}


def report(result: dict) -> None:
    rows = []
    for name, started in result["respawn"]["kill_to_started_ms"].items():
        answering = result["respawn"]["kill_to_answering_ms"][name]
        rows.append([name, started.get("p50"), started.get("p90"), answering.get("p50"), answering.get("p90"),
                     started.get("n")])
    cold = result["respawn"]["cold_start_ms"]["exec_to_answering"]
    rows.append(["none (cold start)", None, None, cold.get("p50"), cold.get("p90"), cold.get("n")])
    print(markdown(["supervisor", "kill→started p50 ms", "p90", "kill→answering p50 ms", "p90", "n"], rows, 1))
    print()
    idle = result["idle"]
    keys = ["node_pss_mb_each", "processes_per_node", "nodes_cpu_percent_each", "host_processes", "host_pss_mb",
            "host_cpu_percent", "manager_pss_mb_per_unit", "manager_cpu_percent"]
    print(markdown(["idle, per driver", *keys], [[d, *(idle[d].get(k) for k in keys)] for d in ("local", "systemd")], 2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=15)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--idle-s", type=float, default=10.0)
    args = parser.parse_args()
    if why := unavailable():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    _rig.compile_checkout()
    work = Path(tempfile.mkdtemp(prefix="cadre-bench-systemd-"))
    stamp = _rig.stamp_binary()
    session, keyring_env = _rig.start_secret_service()
    manager = UserManager().start()
    base = random.randrange(21000, 29000, 100)
    result: dict = {"rounds": args.rounds, "loadavg_at_start": os.getloadavg()}
    try:
        result["respawn"] = respawn_phase(work / "respawn", stamp, base, keyring_env, manager, args.rounds)
        result["idle"] = idle_phase(work / "idle", stamp, base + 50, keyring_env, manager, args.nodes, args.idle_s)
        result["moved_other_processes"] = len(manager.moved_others())
    finally:
        manager.stop()
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["loadavg_at_end"] = os.getloadavg()
    print(f"wrote {write_result('systemd-driver', result)}", file=sys.stderr)
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
