"""Size and start-up times of a built bundle, for bench/README.md (Linux).

    .venv/bin/python packaging/measure.py [dist/cadre-desktop] [-n 10] [--json FILE]

Prints one table. "cold" evicts the bundle's own files from the page cache first
(posix_fadvise DONTNEED on each; the system's libraries stay cached), "warm" is
n runs right after (median and fastest). Measured:
  --version                    process start to exit
  headless host → control API  `--headless` start until GET /api/nodes answers
  node → /status               `--node` (as the host starts a node) until GET /status answers,
                               with its memory once up (RSS, and the anonymous part that each
                               extra node adds; see anonymous_mb); beside it the same
                               node run by this venv's Python (`-m cadre_desktop.node`)
A headless host with no nodes does not touch the keyring, so none is needed here.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def evict(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def env_without_python(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "CADRE_", "QT_", "VIRTUAL_ENV"))}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return {**env, **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, token: str | None = None) -> bool:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def until(predicate, proc: subprocess.Popen, timeout: float = 60) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        if predicate():
            return time.monotonic()
        time.sleep(0.005)
    raise TimeoutError


def version_s(exe: Path) -> float:
    started = time.monotonic()
    subprocess.run([str(exe), "--version"], check=True, stdout=subprocess.DEVNULL, env=env_without_python())
    return time.monotonic() - started


def host_s(exe: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="cadre-measure-") as home:
        control = Path(home) / "control.json"

        def answers() -> bool:
            try:
                doc = json.loads(control.read_text())
            except (OSError, ValueError):
                return False
            return doc.get("pid") == proc.pid and get(doc["url"] + "/api/nodes", doc["token"])

        started = time.monotonic()
        proc = subprocess.Popen([str(exe), "--headless"], env=env_without_python(CADRE_DESKTOP_HOME=home),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return until(answers, proc) - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def anonymous_mb(pid: int) -> float:
    """Memory no other process can share (heap, stacks, written pages): each extra node's cost.

    USS would also count the bundle's library pages, which are private only while
    one process maps them; a hundred nodes of one bundle share them.
    """
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def node_run(command: list[str]) -> tuple[float, float, float]:
    """Seconds until /status answers, and RSS and anonymous memory (MB) once it does."""
    with tempfile.TemporaryDirectory(prefix="cadre-measure-node-") as folder:
        api, p2p = free_port(), free_port()
        env = env_without_python(
            CADRE_NODE_ID=f"measure-{secrets.token_hex(4)}", CADRE_NODE_DIR=folder, CADRE_API_HOST="127.0.0.1",
            CADRE_API_PORT=str(api), CADRE_P2P_PORT=str(p2p), CADRE_ADVERTISE_HOST="127.0.0.1",
            CADRE_CLAIM_SECRET=secrets.token_urlsafe(32))
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            took = until(lambda: get(f"http://127.0.0.1:{api}/status"), proc) - started
            return took, psutil.Process(proc.pid).memory_info().rss / 2**20, anonymous_mb(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", nargs="?", default=str(ROOT / "dist" / "cadre-desktop"))
    parser.add_argument("-n", type=int, default=10, help="warm runs per measure (10)")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers to FILE")
    args = parser.parse_args()
    folder = Path(args.bundle)
    exe = folder / "cadre-desktop"
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    files = sum(1 for p in folder.rglob("*") if p.is_file())

    rows = []
    for name, measure in (("--version", version_s), ("headless host → control API", host_s)):
        evict(folder)
        cold = measure(exe)
        warm = [measure(exe) for _ in range(args.n)]
        rows.append((name, f"{cold * 1000:.0f}", f"{statistics.median(warm) * 1000:.0f}", f"{min(warm) * 1000:.0f}", ""))
    for label, command in (("node → /status (bundle)", [str(exe), "--node"]),
                           ("node → /status (venv Python)", [sys.executable, "-m", "cadre_desktop.node"])):
        if "bundle" in label:
            evict(folder)
        cold = node_run(command)
        warm = [node_run(command) for _ in range(args.n)]
        rss = statistics.median(w[1] for w in warm)
        anonymous = statistics.median(w[2] for w in warm)
        rows.append((label, f"{cold[0] * 1000:.0f}", f"{statistics.median(w[0] for w in warm) * 1000:.0f}",
                     f"{min(w[0] for w in warm) * 1000:.0f}", f"RSS {rss:.0f} MB, anonymous {anonymous:.0f} MB"))

    print(f"bundle: {folder} — {size / 1e6:.0f} MB in {files} files")
    print("| measure | cold (ms) | warm p50 (ms) | warm min (ms) | memory once up |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        keys = ("measure", "cold_ms", "warm_p50_ms", "warm_min_ms", "memory")
        Path(args.json).write_text(json.dumps({"bundle_bytes": size, "files": files,
                                               "rows": [dict(zip(keys, row)) for row in rows]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
