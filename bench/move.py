"""A planned move (issue 36): click to serving on the new computer, and the fleet store's idle cost in the host.

    .venv/bin/python bench/move.py [--rounds 6] [--idle 30]

Three real headless hosts on 127.0.0.1 (their own homes, keyring files and fleet ports), paired
by code (A-B, A-C), each running its etcd member as the host does (`host/fleetrun/store.py`:
TLS from the fleet key, Raft timings of `MemberSpec`'s defaults). One reference node is added on
A and claimed. Then `--rounds` moves around the ring A -> B -> C -> A ..., each asked on the
control API of the computer that hosts the node (`POST /api/nodes/{id}/move`): the time from the
request to the answer, which comes once the new copy answers `/status` with the same peer id
(and the old record, copy and folder are removed: the answer waits for that too). The goal is
2 s. Then `--idle` seconds with nothing asked: each host's CPU and each etcd member's CPU and
RSS (the member is the host's child). Writes bench/results/move.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import summary, table, write_result  # noqa: E402

from tests.support.fleet_hosts import fleet_host, ok  # noqa: E402
from tests.support.host_calls import claim  # noqa: E402


def wait(what: str, check, timeout: float = 120.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise SystemExit(f"timed out waiting for {what}")


def etcd_of(host) -> psutil.Process | None:
    for child in psutil.Process(host.proc.pid).children(recursive=True):
        if child.name().startswith("etcd"):
            return child
    return None


def idle(hosts, seconds: float) -> list[list]:
    procs = [(h, psutil.Process(h.proc.pid), etcd_of(h)) for h in hosts]
    before = [(p.cpu_times(), e.cpu_times() if e else None) for _, p, e in procs]
    time.sleep(seconds)
    rows = []
    for (h, p, e), (bp, be) in zip(procs, before, strict=True):
        ap = p.cpu_times()
        host_cpu = ((ap.user + ap.system) - (bp.user + bp.system)) / seconds * 100
        etcd_cpu = etcd_rss = None
        if e is not None and be is not None:
            ae = e.cpu_times()
            etcd_cpu = ((ae.user + ae.system) - (be.user + be.system)) / seconds * 100
            etcd_rss = e.memory_info().rss / 2**20
        rows.append([h.home.name, host_cpu, etcd_cpu, etcd_rss])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cadre-bench-move-"))
    hosts = [fleet_host(root, name) for name in ("alpha", "bravo", "charlie")]
    spent: list[float] = []
    try:
        for h in hosts:
            h.start()
        a, b, c = hosts
        node = ok(a, "POST", "/api/nodes", {"name": "Study"}, status=201)
        wait("the node running", lambda: a.node(node["id"])["ready"])
        assert claim(a.node(node["id"]), "family")[0] == 200
        wait("the node claimed", lambda: a.node(node["id"])["status"] == "joined")
        for joiner in (b, c):
            code = ok(a, "POST", "/api/fleet/invite", {}, status=201)
            ok(joiner, "POST", "/api/fleet/join", {"code": code["code"], "address": code["address"]})
        for h in hosts:
            wait(f"the store on {h.home.name}", lambda h=h: (ok(h, "GET", "/api/fleet")["store"] or {}).get("state") == "ready")
        ids = {h.home.name: next(x["id"] for x in ok(h, "GET", "/api/fleet")["computers"] if x["self"]) for h in hosts}
        ring = [a, b, c]
        for i in range(args.rounds):
            source, target = ring[i % 3], ring[(i + 1) % 3]
            began = time.perf_counter()
            status, doc = source.api("POST", f"/api/nodes/{node['id']}/move", {"to": ids[target.home.name]})
            spent.append((time.perf_counter() - began) * 1000)
            if status != 200:
                raise SystemExit(f"move {i} failed: {doc}")
            print(f"move {i + 1}: {source.home.name} -> {target.home.name} in {spent[-1]:.0f} ms (generation {doc['generation']})")
        idle_rows = idle(hosts, args.idle)
    finally:
        for h in hosts:
            if h.proc and h.proc.poll() is None:
                h.stop()
    s = summary(spent)
    print(table(["move, request to new copy serving (ms)", "p50", "p90", "max"], [["A->B->C->A", s["p50"], s["p90"], s["max"]]]))
    print(table(["host", "host CPU % (idle)", "etcd CPU %", "etcd RSS MB"], idle_rows, digits=3))
    path = write_result("move", {"rounds": args.rounds, "idle_s": args.idle, "move_ms": s, "moves_ms": spent,
                                 "idle": {r[0]: {"host_cpu_percent": r[1], "etcd_cpu_percent": r[2], "etcd_rss_mb": r[3]}
                                          for r in idle_rows}})
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
