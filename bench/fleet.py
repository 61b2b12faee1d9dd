"""The fleet on loopback: a remote action's round trip, `node list --all` over 3 computers, the link's idle cost.

    .venv/bin/python bench/fleet.py [--nodes 30] [--rounds 30] [--idle 60]

Three real headless hosts (their own homes, keyring files and fleet ports on 127.0.0.1), each with
`--nodes` nodes of `bench/minimal_node.py` (the host's cost, not a hundred Python web servers'),
paired by code (A-B, A-C; A introduces B and C). Then, from C's control API:

- `GET /api/nodes?scope=fleet` (every computer's nodes: C's, and A's and B's over the link);
- `POST /api/nodes/{id}/restart` of a node of B (forwarded over the link; B restarts it);
- a local `GET /api/nodes` on C, the baseline;

and the CPU time each host spends over `--idle` seconds with nothing asked, against the same hosts
before pairing (the link's idle cost: reachability checks on kept TLS connections).
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

from tests.support import port_blocks  # noqa: E402
from tests.support.fleet_hosts import fleet_host, ok  # noqa: E402

MINIMAL = [sys.executable, "-I", "-S", str(Path(__file__).with_name("minimal_node.py"))]


def timed(rounds: int, call) -> list[float]:
    spent = []
    for _ in range(rounds):
        began = time.perf_counter()
        call()
        spent.append((time.perf_counter() - began) * 1000)
    return spent


def idle_cpu(hosts, seconds: float) -> list[float]:
    """Each host process's CPU over `seconds`, in percent of one core."""
    procs = [psutil.Process(h.proc.pid) for h in hosts]
    before = [p.cpu_times() for p in procs]
    time.sleep(seconds)
    after = [p.cpu_times() for p in procs]
    return [((a.user + a.system) - (b.user + b.system)) / seconds * 100 for a, b in zip(after, before, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--idle", type=float, default=60.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cadre-bench-fleet-"))
    hosts = []
    for name in ("alpha", "bravo", "charlie"):
        low = port_blocks.take(2 * args.nodes + 10, 20000, 30000)
        hosts.append(fleet_host(root, name, node_command=MINIMAL, port_range=[low, low + 2 * args.nodes + 9]))
    try:
        for h in hosts:
            h.start()
        a, b, c = hosts
        ids = {h.home.name: [ok(h, "POST", "/api/nodes", {"name": f"n{i}"}, status=201)["id"] for i in range(args.nodes)]
               for h in hosts}
        unpaired = idle_cpu(hosts, args.idle)
        for joiner in (b, c):
            code = ok(a, "POST", "/api/fleet/invite", {}, status=201)
            ok(joiner, "POST", "/api/fleet/join", {"code": code["code"], "address": code["address"]})
        while len(ok(c, "GET", "/api/nodes?scope=fleet")["nodes"]) < 3 * args.nodes:
            time.sleep(0.2)
        time.sleep(5)  # every peer checked once: the kept connections are up
        paired = idle_cpu(hosts, args.idle)
        results = {
            "fleet list (3 computers)": timed(args.rounds, lambda: ok(c, "GET", "/api/nodes?scope=fleet")),
            "local list (C)": timed(args.rounds, lambda: ok(c, "GET", "/api/nodes")),
        }
        if ids["bravo"]:
            target = ids["bravo"][0]
            results["remote restart (C -> B)"] = timed(args.rounds, lambda: ok(c, "POST", f"/api/nodes/{target}/restart"))
    finally:
        for h in hosts:
            if h.proc and h.proc.poll() is None:
                h.stop()
    rows = [[name, *(summary(v)[k] for k in ("p50", "p90", "max"))] for name, v in results.items()]
    print(table(["call (ms)", "p50", "p90", "max"], rows))
    idle_rows = [[h.home.name, before, after, (after - before)] for h, before, after in zip(hosts, unpaired, paired, strict=True)]
    print(table(["host", "idle CPU % unpaired", "paired", "link's cost"], idle_rows, digits=3))
    path = write_result(f"fleet-{args.nodes}n", {"nodes_per_computer": args.nodes, "rounds": args.rounds, "idle_s": args.idle,
                                  "calls_ms": {k: summary(v) for k, v in results.items()},
                                  "idle_cpu_percent": {h.home.name: {"unpaired": u, "paired": p}
                                                       for h, u, p in zip(hosts, unpaired, paired, strict=True)}})
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
