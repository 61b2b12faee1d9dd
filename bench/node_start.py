"""The reference node alone: exec -> answering GET /status, CPU, and memory once idle.

    .venv/bin/python bench/node_start.py [-n 15] [--baseline PATH] [--variant LABEL=PATH ...]
                                         [--first] [--importtime]

Each variant is a checkout of this repository (this one by default; `--baseline`
adds another, e.g. `git worktree add /tmp/before main`), run with this venv's
Python as `python -m cadre_desktop.node` from inside that checkout, so its own
code is what runs, its bytecode compiled first (`_rig.compile_checkout`: with
PYTHONDONTWRITEBYTECODE set, as here, a checkout's modules would be compiled at
every start, which no installed copy does). Rounds alternate the variants (the order rotates), so a load
that comes and goes hits them alike. Each start:

- an *ordinary start* (the work folder already holds the identity, as on every
  respawn; `--first` instead gives each start a new folder, so the node makes its key);
- exec -> the first 200 from GET /status, polled every millisecond;
- then five more GETs (like the host's probe), 1 s idle, and psutil's RSS, USS and PSS;
- SIGTERM, and the CPU time the process used in all (user + system, from wait4:
  exact, and far less sensitive to other load than wall time).

`--realtime` runs the benchmark and its nodes at the lowest real-time priority
(SCHED_FIFO 1; Linux, as root): they then run ahead of every other job on a
shared machine, which is the nearest a busy machine gets to a quiet one (the other
jobs still share the caches and the memory bus). Say so when quoting its figures.

`--importtime` runs each variant a few more times under `python -X importtime` and
lists where its imports go (per top-level package, the fastest of the runs).
Writes bench/results/node_start.json.
"""

from __future__ import annotations

import argparse
import collections
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _rig
import psutil
from _report import markdown, summary, table, write_result

GOALS = {"exec -> answering p50 (ms)": 120.0, "RSS (MB)": 30.0, "USS (MB)": 15.0}
TIMEOUT_S = 20.0
IDLE_S = 1.0


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_env(checkout: Path, node_dir: Path) -> tuple[dict[str, str], int]:
    port = free_port()
    env = _rig.node_env("bench-node", node_dir, port, free_port())
    env["PYTHONPATH"] = str(checkout)
    env["CADRE_CLAIM_SECRET"] = secrets.token_urlsafe(32)
    return env, port


def one_start(checkout: Path, node_dir: Path, log: Path) -> dict:
    env, port = node_env(checkout, node_dir)
    with open(log, "ab") as out:
        t0 = time.monotonic_ns()
        proc = subprocess.Popen(_rig.node_command(), env=env, cwd=checkout, stdout=out, stderr=out,
                                stdin=subprocess.DEVNULL)
    try:
        t_ready = _rig.wait_status(port, TIMEOUT_S)
        if t_ready is None:
            raise SystemExit(f"bench: the node from {checkout} never answered; see {log}")
        for _ in range(5):
            _rig.status_ok(port)
        time.sleep(IDLE_S)
        mem = psutil.Process(proc.pid).memory_full_info()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "ready_ms": (t_ready - t0) / 1e6,
        "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000,
        "rss_mb": mem.rss / 2**20,
        "uss_mb": mem.uss / 2**20,
        "pss_mb": mem.pss / 2**20,
        "exit": proc.returncode,
    }


def import_profile(checkout: Path, runs: int, work: Path) -> dict[str, float]:
    """Top-level package -> ms of import time (the fastest of `runs` starts, per module)."""
    best: dict[str, int] = {}
    node_dir = work / f"imports-{checkout.name}"
    for run_number in range(runs + 1):  # the first one makes the identity, and is not counted
        env, port = node_env(checkout, node_dir)
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "cadre_desktop.node"], env=env,
                                cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)
        _rig.wait_status(port, TIMEOUT_S)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=TIMEOUT_S)[1].decode(errors="replace")
        for line in err.splitlines() if run_number else ():
            if line.startswith("import time:") and "self [us]" not in line:
                self_us, _, name = line[len("import time:"):].split("|")
                best[name.strip()] = min(best.get(name.strip(), 10**12), int(self_us))
    packages: collections.defaultdict[str, float] = collections.defaultdict(float)  # milliseconds
    for name, us in best.items():
        packages[name.split(".")[0]] += us / 1000
    packages["(all, %d modules)" % len(best)] = sum(best.values()) / 1000
    return dict(sorted(packages.items(), key=lambda item: item[1], reverse=True)[:14])


def load() -> str:
    return "%.1f %.1f %.1f" % os.getloadavg()


def run(variants: dict[str, Path], rounds: int, first: bool, importtime: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cadre-bench-node-"))
    samples: dict[str, list[dict]] = {label: [] for label in variants}
    result: dict = {"rounds": rounds, "first_start": first, "load_start": load(),
                    "variants": {label: str(path) for label, path in variants.items()}}
    labels = list(variants)
    for label, checkout in variants.items():  # bytecode, the identity, and a warm page cache
        _rig.compile_checkout(checkout)
        one_start(checkout, work / label, work / f"{label}.log")
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            node_dir = work / (f"{label}-{r}" if first else label)
            samples[label].append(one_start(variants[label], node_dir, work / f"{label}.log"))
    result["load_end"] = load()
    result["samples"] = samples
    result["summary"] = {label: {key: summary([s[key] for s in rows]) for key in
                                 ("ready_ms", "cpu_ms", "rss_mb", "uss_mb", "pss_mb")}
                         for label, rows in samples.items()}
    if importtime:
        result["imports_ms"] = {label: import_profile(path, importtime, work) for label, path in variants.items()}
    return result


def report(result: dict) -> str:
    headers = ["variant", "exec->answering p50 (ms)", "min", "p90", "CPU p50 (ms)", "CPU min",
               "RSS p50 (MB)", "USS p50 (MB)", "PSS p50 (MB)"]
    rows = []
    for label, s in result["summary"].items():
        rows.append([label, s["ready_ms"]["p50"], s["ready_ms"]["min"], s["ready_ms"]["p90"],
                     s["cpu_ms"]["p50"], s["cpu_ms"]["min"], s["rss_mb"]["p50"], s["uss_mb"]["p50"],
                     s["pss_mb"]["p50"]])
    kind = "first starts (a new work folder each)" if result["first_start"] else "ordinary starts"
    how = ", at real-time priority (as if quiet)" if result.get("realtime") else ""
    out = [f"{result['rounds']} {kind} per variant{how}; load {result['load_start']} -> {result['load_end']}",
           table(headers, rows, 1), "", markdown(headers, rows, 1)]
    out.append("")
    for label, s in result["summary"].items():
        figures = {"exec -> answering p50 (ms)": s["ready_ms"]["p50"], "RSS (MB)": s["rss_mb"]["p50"],
                   "USS (MB)": s["uss_mb"]["p50"]}
        words = [f"{name} {value:.1f} (goal <= {GOALS[name]:g}: {'met' if value <= GOALS[name] else 'missed'})"
                 for name, value in figures.items()]
        out.append(f"- {label}: " + "; ".join(words))
    if "imports_ms" in result:
        out += ["", "Import time by top-level package (ms, fastest run per module):"]
        for label, packages in result["imports_ms"].items():
            out.append(f"  {label}: " + ", ".join(f"{name} {ms:.1f}" for name, ms in packages.items()))
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=15, help="starts per variant (default 15)")
    parser.add_argument("--baseline", type=Path, help="another checkout, run as the variant 'before'")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=PATH",
                        help="a checkout to run under LABEL (repeatable); this checkout is 'this' unless given")
    parser.add_argument("--first", action="store_true", help="first starts: the node makes its key each time")
    parser.add_argument("--importtime", type=int, default=0, metavar="RUNS",
                        help="also profile imports over RUNS starts per variant")
    parser.add_argument("--realtime", action="store_true",
                        help="run at real-time priority (SCHED_FIFO 1, root): as if the machine were quiet")
    parser.add_argument("--name", default="node_start", help="result file name (default node_start)")
    args = parser.parse_args()
    if args.realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # inherited by every node it starts
    variants: dict[str, Path] = {}
    if args.baseline:
        variants["before"] = args.baseline.resolve()
    for item in args.variant:
        label, _, path = item.partition("=")
        variants[label] = Path(path).resolve()
    if not args.variant:
        variants["this"] = _rig.ROOT
    result = run(variants, args.n, args.first, args.importtime)
    result["realtime"] = args.realtime
    print(report(result))
    print(f"\nwritten to {write_result(args.name, result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
