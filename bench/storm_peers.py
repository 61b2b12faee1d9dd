"""The storm beside pm2: N nodes, K of them SIGKILLed at once, for ours (warm, cold) and pm2.

    .venv/bin/python bench/storm_peers.py [--nodes 100] [--kill 50] [--rounds 1] [--peers pm2[,supervisord]]
                                          [--settle 5] [--normal-priority] [--seed 26]

One supervisor at a time, in the same run (the order reversed every other round):
our headless host with warm starts on (`warm_standby`), the same host with them
off, and pm2 (supervisord too with `--peers pm2,supervisord`; it restarts on its
1 s tick). Each starts N reference nodes (`python -m cadre_desktop.node`, behind
the `stamp` wrapper, configured for an immediate unlimited restart, as in
bench/respawn.py: bench/_supervisors.py), waits until all answer, lets them
settle (and waits until our warm host's standby pool is back to its calm size,
so the storm meets the pool a long-running host has), then SIGKILLs the same K
node indices at once and measures

  each victim   kill -> its new child answering GET /status
  all           kill -> all K answering again

Answers are polled from a separate process (bench/_await_ports.py, started
before the kill; it polls a port only once the killed pid is gone), at the
nodes' priority (our nodes run at nice 10 by default, pm2's at 0). For ours it
also counts the standbys loaded at the kill and the victims whose new child
was a standby (warm takes), and of those how many were loaded before the kill;
for all, the supervising process's CPU during the storm, the new children's,
and what else the machine was busy with meanwhile (others' work: a storm that
met a busy machine shows there). Every supervisor and its nodes are stopped
before the next starts. Prints min / p50 / p90 / max per supervisor and pm2's
p50 over ours, writes bench/results/storm-peers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _rig
import psutil
from _report import ROOT, markdown, summary, table, write_result
from _supervisors import Ours, OursWarm, Pm2, Supervised, Supervisord

#: Issue 26: a warm respawn answers at least this many times sooner than pm2's, in a storm too.
GOAL_TIMES_PM2 = 5
TIMEOUT_S = 180.0
#: Our warm host keeps extra standbys for CALM_S (30 s) after a burst of takes (its nodes' first
#: starts are one); the storm waits at most this long for the pool to be back to one.
CALM_WAIT_S = 60.0
WARM, COLD = "ours warm", "ours cold"
NAMES = {WARM: OursWarm.name, COLD: Ours.name, "pm2": Pm2.name, "supervisord": Supervisord.name}
#: Ports per phase: N nodes take 2 N, ours a few spare.
PORT_BLOCK = 250


def make(kind: str, work: Path, stamp: Path, base: int, count: int, keyring_env: dict,
         normal_priority: bool) -> Supervised:
    settings = {"node_low_priority": False} if normal_priority else None
    if kind == WARM:
        return OursWarm(work, stamp, base, keyring_env=keyring_env, settings=settings, count=count)
    if kind == COLD:
        return Ours(work, stamp, base, keyring_env=keyring_env, settings=settings, count=count)
    if kind == "pm2":
        return Pm2(work, stamp, base, count=count)
    return Supervisord(work, stamp, base, count=count)


def listeners(ports: list[int]) -> dict[int, int]:
    """port -> pid of the process listening on it (loopback, TCP)."""
    wanted = set(ports)
    out: dict[int, int] = {}
    for conn in psutil.net_connections(kind="tcp4"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port in wanted and conn.pid:
            out[conn.laddr.port] = conn.pid
    return out


class Poller:
    """bench/_await_ports.py in its own process, at the nodes' priority."""

    def __init__(self, ports: list[int], old: dict[int, int] | None, timeout: float, nice: int) -> None:
        args = [f"{p}:{old[p]}" if old and p in old else str(p) for p in ports]
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_await_ports.py"), str(timeout), *args],
                                     stdout=subprocess.PIPE, preexec_fn=(lambda: os.nice(nice)) if nice else None)

    def result(self) -> dict:
        out, _ = self.proc.communicate()
        doc = json.loads(out)
        return {"answered": {int(k): v for k, v in doc["answered"].items()}, "missing": doc["missing"]}


def standbys(sup: Supervised, node_pids: set[int]) -> int:
    """Our host's loaded standbys: its children started with CADRE_STANDBY that serve no node."""
    pid = sup.host_pid()
    if pid is None or not isinstance(sup, Ours):
        return 0
    count = 0
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    for child in children:
        try:
            if child.pid not in node_pids and child.environ().get("CADRE_STANDBY") == "1":
                count += 1
        except psutil.Error:
            continue
    return count


def wait_calm(sup: Supervised, ports: list[int]) -> int:
    """Wait until our warm host keeps one standby again (at most CALM_WAIT_S); how many it keeps."""
    deadline = time.monotonic() + CALM_WAIT_S
    kept = standbys(sup, set(listeners(ports).values()))
    while getattr(sup, "warm", False) and kept > 1 and time.monotonic() < deadline:
        time.sleep(1.0)
        kept = standbys(sup, set(listeners(ports).values()))
    return kept


def storm(sup: Supervised, victims: list[int], settle: float, nice: int) -> dict:
    """All up, settled; SIGKILL the victims at once; each one's kill -> answering again."""
    ports = sup.ports()
    t = time.monotonic()
    got = Poller(ports, None, TIMEOUT_S, nice).result()
    if got["missing"]:
        raise RuntimeError(f"{sup.name}: {len(got['missing'])} nodes never answered (see {sup.work})")
    out: dict = {"start_call_to_all_answering_s": time.monotonic() - t}
    time.sleep(settle)
    out["standbys_at_kill"] = wait_calm(sup, ports)
    targets = [ports[i] for i in victims]
    old = listeners(targets)
    if len(old) != len(targets):
        raise RuntimeError(f"{sup.name}: no listener found on {sorted(set(targets) - set(old))}")
    poller = Poller(targets, old, TIMEOUT_S, nice)
    time.sleep(0.5)  # the poller loaded, spinning on the old pids
    out["loadavg_at_kill"] = os.getloadavg()
    before = set(psutil.pids())
    cpu_before = _cpu_s(sup.host_pid())
    busy_before, poller_before = _busy_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic_ns()
    for port in targets:
        os.kill(old[port], signal.SIGKILL)
    got = poller.result()  # it ends right after the last answer
    busy = _busy_s() - busy_before
    poller_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["poller_cpu_s"] = (poller_after.ru_utime + poller_after.ru_stime
                           - poller_before.ru_utime - poller_before.ru_stime)
    each = {p: (ns - t0) / 1e6 for p, ns in got["answered"].items()}
    out["missing"] = len(got["missing"])
    out["each_ms"] = sorted(each.values())
    out["all_answering_s"] = max(each.values()) / 1e3 if each and not got["missing"] else None
    out["supervisor_cpu_s"] = _cpu_s(sup.host_pid()) - cpu_before
    new = listeners(targets)
    # The new children's CPU so far: their starts (a standby's load included, whenever it was).
    out["new_children_cpu_s"] = sum(_cpu_s(pid) for pid in set(new.values()) - set(old.values()))
    # The machine's CPU busy from the kill to the last answer, and what of it no part of the storm
    # explains (other engineers' work, the other nodes): a storm that met a busy machine shows here.
    out["machine_busy_cpu_s"] = busy
    out["unexplained_cpu_s"] = busy - out["supervisor_cpu_s"] - out["new_children_cpu_s"] - out["poller_cpu_s"]
    # A warm take: the new child was a standby (started with CADRE_STANDBY=1, which its
    # /proc environ keeps); loaded before the kill, or during the storm (the burst pool).
    takes = [p for p, pid in new.items() if _was_standby(pid)]
    out["warm_takes"] = len(takes)
    out["warm_takes_loaded_before_kill"] = sum(1 for p in takes if new[p] in before)
    out["warm_takes_each_ms"] = sorted(each[p] for p in takes if p in each)
    out["respawned"] = sum(1 for p, pid in new.items() if pid != old.get(p))
    return out


def _cpu_s(pid: int | None) -> float:
    """A process's CPU time (user + system), 0 when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times() if pid else None
    except psutil.Error:
        return 0.0
    return times.user + times.system if times else 0.0


def _busy_s() -> float:
    """The machine's CPU time spent busy (all cores), from /proc/stat."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def _was_standby(pid: int) -> bool:
    try:
        return psutil.Process(pid).environ().get("CADRE_STANDBY") == "1"
    except psutil.Error:
        return False


def stop(sup: Supervised) -> list[int]:
    """Stop the supervisor; wait until nothing listens on its nodes' ports; the pids that still do."""
    ports = sup.ports()
    try:
        sup.stop()
    except Exception as exc:  # a stuck supervisor must not leave its nodes behind
        print(f"  stopping {sup.name} failed: {exc}", file=sys.stderr)
    deadline = time.monotonic() + 30
    left = listeners(ports)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = listeners(ports)
    for pid in set(left.values()):  # our own strays: the nodes this phase started
        print(f"  {sup.name}: node pid {pid} outlived its supervisor; killed", file=sys.stderr)
        os.kill(pid, signal.SIGKILL)
    proc = getattr(sup, "proc", None)  # supervisord's process (ours and pm2 wait for theirs)
    if isinstance(proc, subprocess.Popen) and proc.poll() is None:
        print(f"  {sup.name}: still running after its stop; killed", file=sys.stderr)
        proc.kill()
        proc.wait()
    return sorted(set(left.values()))


def phase(kind: str, work: Path, stamp: Path, base: int, args: argparse.Namespace, victims: list[int]) -> dict:
    # Our hosts each get a fresh private keyring (a gnome-keyring that died under an earlier
    # phase's hundreds of secrets must not fail the next one); pm2 and supervisord use none.
    session, keyring_env = _rig.start_secret_service() if kind in (WARM, COLD) else (None, {})
    sup = make(kind, work, stamp, base, args.nodes, keyring_env, args.normal_priority)
    nice = 10 if kind in (WARM, COLD) and not args.normal_priority else 0
    out: dict = {"supervisor": sup.name, "loadavg_at_start": os.getloadavg(), "poller_nice": nice}
    try:
        t = time.monotonic()
        sup.start()
        out["start_call_s"] = time.monotonic() - t
        out["version"] = sup.version()
        out.update(storm(sup, victims, args.settle, nice))
    finally:
        out["strays"] = stop(sup)
        out["loadavg_at_end"] = os.getloadavg()
        if session is not None:
            session.stop()
    print(f"  {kind}: p50 {summary(out.get('each_ms', []))['p50']} ms, all in {out.get('all_answering_s')} s, "
          f"load {out.get('loadavg_at_kill', ['?'])[0]}", file=sys.stderr)
    return out


def run(args: argparse.Namespace) -> dict:
    kinds = [k for k in (WARM, COLD, *args.peers) if not args.only or k.split()[-1] in args.only]
    victims = sorted(random.Random(args.seed).sample(range(args.nodes), args.kill))
    work = Path(tempfile.mkdtemp(prefix="cadre-bench-storm-peers-"))
    stamp = _rig.stamp_binary()
    base = random.randrange(20000, 32000 - PORT_BLOCK * len(kinds) * args.rounds, 100)
    result: dict = {"nodes": args.nodes, "killed": args.kill, "victims": victims, "settle_s": args.settle,
                    "node_low_priority": not args.normal_priority, "loadavg_at_start": os.getloadavg(),
                    "rounds": []}
    block = 0
    try:
        for r in range(args.rounds):
            order = kinds if r % 2 == 0 else kinds[::-1]
            phases: dict = {}
            for kind in order:
                print(f"round {r + 1}/{args.rounds}: {kind}", file=sys.stderr)
                try:
                    phases[kind] = phase(kind, work / f"r{r}-{kind.replace(' ', '-')}", stamp,
                                         base + PORT_BLOCK * block, args, victims)
                except Exception as exc:  # one failed phase is told, the others still count
                    print(f"  {kind} failed: {exc}", file=sys.stderr)
                    phases[kind] = {"error": str(exc), "loadavg_at_end": os.getloadavg()}
                block += 1
            result["rounds"].append({"order": order, "phases": phases})
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["work_dir"] = str(work) if args.keep else None
    result["loadavg_at_end"] = os.getloadavg()
    return result


def summarize(result: dict) -> dict:
    """Per supervisor: every victim of every round pooled, and each round's time until all answered."""
    out: dict = {}
    for rnd in result["rounds"]:
        for kind, ph in rnd["phases"].items():
            if "error" in ph:
                continue
            s = out.setdefault(kind, {"each": [], "all_s": [], "load": [], "takes": [], "standbys": [], "cpu": []})
            s["each"] += ph.get("each_ms", [])
            s["all_s"].append(ph.get("all_answering_s"))
            s["load"].append(ph.get("loadavg_at_kill", [None])[0])
            s["takes"].append(f"{ph.get('warm_takes')} ({ph.get('warm_takes_loaded_before_kill')})")
            s["standbys"].append(ph.get("standbys_at_kill"))
            s["cpu"].append((ph.get("supervisor_cpu_s"), ph.get("new_children_cpu_s"), ph.get("unexplained_cpu_s")))
    return {kind: {"each_answering_ms": summary(s["each"]), "all_answering_s": s["all_s"],
                   "load_at_kill": s["load"], "warm_takes": s["takes"],
                   "standbys_at_kill": s["standbys"], "cpu_s_supervisor_children": s["cpu"]} for kind, s in out.items()}


def _ratio(value, base):
    return value / base if value is not None and base else None


def rows_for(summ: dict) -> tuple[list[str], list[list]]:
    headers = ["supervisor", "min (ms)", "p50 (ms)", "p90 (ms)", "max (ms)", "all answering (s)",
               "pm2 p50 ÷ this", "standbys at kill", "warm takes (loaded before)", "CPU s: supervisor, new children, other",
               "load at kill"]
    pm2 = summ.get("pm2", {}).get("each_answering_ms", {}).get("p50")
    rows = []
    for kind, s in summ.items():
        e = s["each_answering_ms"]
        rows.append([f"{kind} ({NAMES[kind]})", e["min"], e["p50"], e["p90"], e["max"],
                     " / ".join(f"{v:.2f}" if v is not None else "never" for v in s["all_answering_s"]),
                     _ratio(pm2, e["p50"]),
                     " / ".join(str(v) for v in s["standbys_at_kill"]) if kind in (WARM, COLD) else "",
                     " / ".join(s["warm_takes"]) if kind in (WARM, COLD) else "",
                     " / ".join(", ".join(f"{v:.2f}" for v in cpu) for cpu in s["cpu_s_supervisor_children"]
                                if None not in cpu),
                     " / ".join(f"{v:.2f}" for v in s["load_at_kill"] if v is not None)])
    return headers, rows


def goals(summ: dict) -> list[str]:
    pm2 = summ.get("pm2", {}).get("each_answering_ms", {}).get("p50")
    lines = []
    for kind in (WARM, COLD):
        ours = summ.get(kind, {}).get("each_answering_ms", {}).get("p50")
        if ours is None or pm2 is None:
            continue
        times = pm2 / ours
        line = f"{kind}: each victim's kill -> answering p50 {ours:.1f} ms, pm2's {pm2:.1f} ms: {times:.2f}x"
        if kind == WARM:
            line += f"; goal >= {GOAL_TIMES_PM2}x  " + ("MET" if times >= GOAL_TIMES_PM2 else "MISSED")
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100, help="nodes per supervisor (default 100)")
    parser.add_argument("--kill", type=int, default=50, help="nodes SIGKILLed at once (default 50)")
    parser.add_argument("--rounds", type=int, default=1, help="storms per supervisor, the order reversed each round")
    parser.add_argument("--peers", default="pm2", help="comma-separated: pm2, supervisord (default pm2)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between all answering and the kill")
    parser.add_argument("--normal-priority", action="store_true",
                        help="our nodes at nice 0 as pm2's (node_low_priority off); default: the product's nice 10")
    parser.add_argument("--only", help="comma-separated subset: warm, cold, pm2, supervisord (default all)")
    parser.add_argument("--seed", type=int, default=26, help="picks the victims (the same for every supervisor)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stamps)")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--name", default="storm-peers", help="results file name (default storm-peers)")
    args = parser.parse_args()
    args.peers = [p for p in args.peers.split(",") if p]
    args.only = set(args.only.split(",")) if args.only else None
    if not 0 < args.kill <= args.nodes or any(p not in NAMES for p in args.peers):
        parser.error("need 0 < --kill <= --nodes and --peers among pm2, supervisord")
    _rig.compile_checkout()  # nodes run with bytecode, as from an installed copy
    result = run(args)
    result["summary"] = summarize(result)
    headers, rows = rows_for(result["summary"])
    print(f"\nstorm: {args.nodes} nodes, {args.kill} SIGKILLed at once, {args.rounds} round(s); "
          "each victim's kill -> its new child answering GET /status")
    print(table(headers, rows))
    result["markdown"] = markdown(headers, rows)
    result["goals"] = goals(result["summary"])
    for line in result["goals"]:
        print(line)
    if not args.no_save:
        print(f"wrote {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
