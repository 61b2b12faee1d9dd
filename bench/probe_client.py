"""The probe's HTTP client: what one `GET /status` of a reference node costs the host.

    .venv/bin/python bench/probe_client.py [--requests 1000] [--name probe-client]

Starts one reference node on 127.0.0.1 and asks it `GET /status` `--requests` times in a
row with each client: aiohttp's (as the probe was, a pooled connection reused), and the
package's h11 client (`cadre_desktop/net/httpclient.py`) with its connection kept (a starting
node's quick probes) and with a fresh connection per request (every regular probe, and
each long-poll). Reports this process's CPU time per request (user + system) and the wall
time, and the RSS an import of each client adds in a fresh interpreter that has asyncio already
(as the host has). Writes
bench/results/NAME.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _report import ROOT, write_result

from cadre_desktop.net import httpclient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_node(work: Path) -> tuple[subprocess.Popen[bytes], int]:
    api, p2p = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    env.update(PYTHONPATH=str(ROOT), CADRE_NODE_ID="bench-probe", CADRE_NODE_DIR=str(work / "node"),
               CADRE_API_HOST="127.0.0.1", CADRE_API_PORT=str(api), CADRE_P2P_PORT=str(p2p),
               CADRE_ADVERTISE_HOST="127.0.0.1", CADRE_CLAIM_SECRET=secrets.token_urlsafe(24))
    (work / "node").mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop.node"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", api), timeout=0.2).close()
            return proc, api
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the reference node never listened")


async def timed(count: int, ask: Callable[[], Awaitable[object]]) -> dict[str, float]:
    for _ in range(20):  # warm
        await ask()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(count):
        await ask()
    return {"cpu_us_per_request": 1e6 * (time.process_time() - cpu) / count,
            "wall_us_per_request": 1e6 * (time.perf_counter() - wall) / count}


async def measure(port: int, count: int) -> dict[str, dict[str, float]]:
    import aiohttp

    out: dict[str, dict[str, float]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32, keepalive_timeout=2.5)) as session:
        async def with_aiohttp() -> bytes:
            async with session.get(f"http://127.0.0.1:{port}/status") as resp:
                return await resp.content.read(65537)
        out["aiohttp, pooled connection"] = await timed(count, with_aiohttp)
    kept = httpclient.Client(fresh_after_s=2.5)
    out["h11 client, kept connection"] = await timed(count, lambda: kept.request("127.0.0.1", port, "GET", "/status"))
    await kept.close()
    fresh = httpclient.Client()
    out["h11 client, fresh connection"] = await timed(count, lambda: fresh.request("127.0.0.1", port, "GET", "/status"))
    return out


def import_rss_mb(module: str) -> float:
    code = ("def rss():\n    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20\n"
            f"import asyncio, json, logging\nbefore = rss()\nimport {module}\nprint(rss() - before)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return round(float(out.strip()), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--name", default="probe-client")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cadre-probe-client-") as tmp:
        proc, port = start_node(Path(tmp))
        try:
            result: dict = {"requests": args.requests, "loadavg_at_start": os.getloadavg(),
                            "clients": asyncio.run(measure(port, args.requests))}
        finally:
            proc.terminate()
            proc.wait(10)
    result["import_rss_mb"] = {m: import_rss_mb(m) for m in ("aiohttp", "cadre_desktop.net.httpclient")}
    result["loadavg_at_end"] = os.getloadavg()
    for name, figures in result["clients"].items():
        print(f"{name:32} CPU {figures['cpu_us_per_request']:7.0f} µs/request, "
              f"wall {figures['wall_us_per_request']:7.0f} µs/request")
    print("RSS an import adds (MB):", result["import_rss_mb"])
    print(f"wrote {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
