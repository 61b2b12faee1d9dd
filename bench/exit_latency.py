"""How fast the orchestrator hears of a SIGKILLed child, and how fast it can spawn again.

    .venv/bin/python bench/exit_latency.py [-n 50]

Spawns a tiny child through the real Orchestrator, SIGKILLs it N times and
measures (a) kill -> exit listener called and (b) the awaited spawn call (its fork/exec on a thread).
Prints min / p50 / p90 / max in milliseconds and writes
bench/results/exit_latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import load, write_result  # noqa: E402

from cadre_desktop.host.local.orchestrator import Orchestrator  # noqa: E402
from cadre_desktop.host.local.ports import PortAllocator  # noqa: E402
from cadre_desktop.paths import Paths  # noqa: E402

CHILD = [sys.executable, "-c", "import time\nwhile True: time.sleep(60)"]


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"min": ordered[0], "p50": statistics.median(ordered), "p90": pick(0.9), "max": ordered[-1]}


async def run(rounds: int) -> dict:
    home = Path(tempfile.mkdtemp(prefix="cadre-bench-"))
    orch = Orchestrator(
        paths=Paths(home, home, home / "logs"),
        node_command=CHILD, ports=PortAllocator(48000, 48099, bind_host="127.0.0.1"),
        bind_host="127.0.0.1", advertise_host=lambda: "127.0.0.1",
    )
    await orch.init()
    exited: asyncio.Future | None = None
    stamps: dict[str, float] = {}

    def on_exit(event) -> None:
        stamps[event.handle_id] = time.perf_counter()
        if exited and not exited.done():
            exited.set_result(event)

    orch.subscribe(on_exit)
    detect, spawn = [], []
    handle = await orch.spawn("bench", {})
    for _ in range(rounds):
        exited = asyncio.get_running_loop().create_future()
        await asyncio.sleep(0.05)  # let the child settle (benchmark pacing, not a wait)
        t0 = time.perf_counter()
        os.kill(handle.pid, signal.SIGKILL)
        await exited
        detect.append((stamps[handle.id] - t0) * 1000)
        t1 = time.perf_counter()
        handle = await orch.spawn("bench", {}, want_ports=handle.ports)
        spawn.append((time.perf_counter() - t1) * 1000)
    await orch.stop(handle.id)
    return {"kill_to_exit_event_ms": summary(detect), "spawn_call_ms": summary(spawn), "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=50)
    args = parser.parse_args()
    at_start = load()
    result = asyncio.run(run(args.n))
    result["loadavg_at_start"] = at_start
    print(f"{'measure':<24}{'min':>8}{'p50':>8}{'p90':>8}{'max':>8}   (ms, {args.n} rounds)")
    for key in ("kill_to_exit_event_ms", "spawn_call_ms"):
        s = result[key]
        print(f"{key:<24}{s['min']:>8.2f}{s['p50']:>8.2f}{s['p90']:>8.2f}{s['max']:>8.2f}")
    print(f"wrote {write_result('exit_latency', result)}")


if __name__ == "__main__":
    main()
