"""What a parked child costs: the memory of a fork server, its parked child, and a node taken from it.

    .venv/bin/python bench/parked_pss.py [-n 5]

Runs the real orchestrator (warm starts on, the reference node, bytecode compiled as an
installed copy has it) in this process, waits for the fork server and its parked child,
reads each one's `/proc/<pid>/smaps_rollup` (RSS, PSS, private pages), then starts a node
(which takes the parked child) and reads the node and the next parked child too. `-n`
rounds, each a new node taking the parked child. Writes bench/results/parked-pss.json with
the load (`bench/README.md`, "The respawn figures").
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import _rig
from _report import load, write_result

FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Shared_Clean", "Shared_Dirty")
WAIT_S = 30.0


def rollup(pid: int) -> dict[str, float]:
    """The process's memory from smaps_rollup, in MB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
        for line in fh:
            key, _colon, rest = line.partition(":")
            if key in FIELDS:
                out[key] = int(rest.split()[0]) / 1024
    out["Private"] = out.get("Private_Clean", 0.0) + out.get("Private_Dirty", 0.0)
    return out


async def wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        await asyncio.sleep(0.02)
    raise SystemExit(f"parked_pss: no {what} within {WAIT_S:.0f} s")


async def run(rounds: int) -> dict:
    from cadre_desktop.host.local.orchestrator import Orchestrator
    from cadre_desktop.host.local.ports import PortAllocator
    from cadre_desktop.paths import Paths

    home = Path(tempfile.mkdtemp(prefix="cadre-bench-parked-"))
    base = 31000 + secrets.randbelow(400) * 20
    orch = Orchestrator(paths=Paths(home, home, home / "logs"), node_command=_rig.node_command(),
                        ports=PortAllocator(base, base + 19, bind_host="127.0.0.1"), bind_host="127.0.0.1",
                        advertise_host=lambda: "127.0.0.1", stop_timeout_s=2.0, warm_standby=True)
    await orch.init()
    pool = orch.standby
    assert pool is not None

    def parked(other_than: int = 0) -> int:
        server = pool.ready
        child = pool.parking.parked(server) if server is not None else None
        return child.popen.pid if child is not None and child.popen.pid != other_than else 0

    samples: dict[str, list[dict[str, float]]] = {"fork server": [], "parked child": [], "node (taken)": []}
    try:
        child = await wait_for(parked, "parked child")
        for round_ in range(rounds):
            await asyncio.sleep(1.0)  # the parked child settled (its pages its own)
            assert pool.ready is not None
            samples["fork server"].append(rollup(pool.ready.popen.pid))
            samples["parked child"].append(rollup(child))
            handle = await orch.start(f"n{round_}", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
            assert handle.pid == child, "the start did not take the parked child"
            await asyncio.to_thread(_rig.wait_status, handle.api_port, WAIT_S)
            await asyncio.sleep(0.5)
            samples["node (taken)"].append(rollup(handle.pid))
            child = await wait_for(lambda c=child: parked(c), "next parked child")
    finally:
        await orch.stop_all()
        orch.close()
    out = {}
    for name, rows in samples.items():
        out[name] = {field: round(statistics.median(r[field] for r in rows), 2) for field in (*FIELDS, "Private")}
        print(f"{name:<14} " + "  ".join(f"{f} {out[name][f]:.1f} MB" for f in ("Rss", "Pss", "Private")))
    return {"rounds": rounds, "mb_median": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=5)
    args = parser.parse_args()
    at_start = load()
    _rig.compile_checkout()
    result = asyncio.run(run(args.n))
    result["loadavg_at_start"] = at_start
    print(f"wrote {write_result('parked-pss', result)}")


if __name__ == "__main__":
    main()
