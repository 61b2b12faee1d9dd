"""The CLI's request time against a host's control API under a flood of connections, the CPU busy.

    .venv/bin/python bench/cli_under_flood.py [--hogs 6] [--samples 60] [--single-try]

A real headless host (a home of its own, 1,024 descriptors, the tests' file keyring),
tests/support/flooder.py holding 5,000 connections on its control API, `--hogs` processes
spinning on the CPU, and `--samples` requests of `GET /api/host` through the CLI's own client
(`cli/client.py: ControlClient`), 0.1 s apart. `--single-try`: each connect given the whole
request's time in one try (`CONNECT_TRY_S` = 30 s), as the CLI connected before `connect_quickly`.
Prints the request times (p50, p90, max, how many over 1 s and over 3 s) as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cadre_desktop.cli import client as cli_client  # noqa: E402
from tests.support.fleet_hosts import keyring_env  # noqa: E402
from tests.support.headless import HeadlessHost, host_settings  # noqa: E402

FLOODER = REPO / "tests" / "support" / "flooder.py"
FLOOD_S = 300


def spin(until: float) -> None:
    while time.time() < until:
        pass


def measure(home: Path, hogs: int, samples: int) -> list[float]:
    host = HeadlessHost(home, keyring_env(home), host_settings(random.Random(7)))
    host.fd_limit = 1024
    host.start()
    port = int(host.control["url"].rsplit(":", 1)[1])
    flood = subprocess.Popen([sys.executable, str(FLOODER), "127.0.0.1", str(port), "5000", str(FLOOD_S)],
                             stdout=subprocess.PIPE, text=True)
    spinners: list[multiprocessing.Process] = []
    times: list[float] = []
    try:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "flooding"
        spinners = [multiprocessing.Process(target=spin, args=(time.time() + FLOOD_S,)) for _ in range(hogs)]
        for p in spinners:
            p.start()
        client = cli_client.ControlClient.from_file(home / "control.json")
        for _ in range(samples):
            started = time.monotonic()
            client.request("GET", "/api/host")
            times.append(time.monotonic() - started)
            time.sleep(0.1)  # the pace of the requests, not a wait for anything
    finally:
        for p in spinners:
            p.terminate()
        flood.kill()
        flood.wait()
        host.stop()
    return sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--single-try", action="store_true")
    args = parser.parse_args()
    if args.single_try:
        cli_client.CONNECT_TRY_S = 30.0
    with tempfile.TemporaryDirectory(prefix="cli-flood-") as tmp:
        times = measure(Path(tmp) / "home", args.hogs, args.samples)
    print(json.dumps({"single_try": args.single_try, "hogs": args.hogs, "n": len(times),
                      "p50_s": round(times[len(times) // 2], 3), "p90_s": round(times[int(len(times) * 0.9)], 3),
                      "max_s": round(times[-1], 3), "over_1s": sum(t > 1 for t in times),
                      "over_3s": sum(t > 3 for t in times)}))


if __name__ == "__main__":
    main()
