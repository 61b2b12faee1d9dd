"""Quit: SIGTERM to the headless host with N running reference nodes -> everything gone.

    .venv/bin/python bench/quit.py [-n 10] [--nodes 10]

The home holds N nodes (added once through the control API). Each round starts
the headless host, waits until every node answers `GET /status`, reads every
node's and log pump's pid from `state.json`, sends the host SIGTERM (a Quit) and
measures, from this process:

  host gone       the host process has exited (reaped)
  all gone        the host and every node and pump pid it named are gone

The keyring is a real gnome-keyring. Writes bench/results/quit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _rig
from _report import markdown, summary, table, write_result
from startup import add_nodes, api_answers

GOAL_S = 0.5


def _pids(home: Path) -> tuple[list[int], list[int]]:
    doc = json.loads((home / "state.json").read_text())
    rows = doc["handles"].values()
    return [r["pid"] for r in rows], [r["pump"]["pid"] for r in rows if r.get("pump")]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _all_answer(home: Path, count: int) -> bool:
    try:
        doc = json.loads((home / "state.json").read_text())
    except (OSError, ValueError):
        return False
    rows = list(doc.get("handles", {}).values())
    return len(rows) == count and all(_rig.status_ok(r["api_port"]) for r in rows)


def one_quit(home: Path, env: dict, count: int) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop", "--headless"], env=env, cwd=home,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (api_answers(home, proc.pid) and _all_answer(home, count)):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the host or its nodes did not come up (exit code {proc.poll()})")
            time.sleep(0.05)
        time.sleep(1.0)  # let the probe's first round settle
        nodes, pumps = _pids(home)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        host_s = time.monotonic() - t0
        rest = nodes + pumps
        while any(_alive(p) for p in rest):
            if time.monotonic() - t0 > 60:
                raise RuntimeError("processes were left behind")
            time.sleep(0.001)
        return {"host_s": host_s, "all_s": time.monotonic() - t0}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run(rounds: int, count: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cadre-bench-quit-"))
    session, keyring_env = _rig.start_secret_service()
    base = random.randrange(20000, 28000, 100)
    home = work / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(
        {"bind_host": "127.0.0.1", "advertise_host": "127.0.0.1", "port_range": [base, base + 99]}))
    env = {**os.environ, **keyring_env, "CADRE_DESKTOP_HOME": str(home), "PYTHONPATH": str(_rig.ROOT)}
    times: dict[str, list[float]] = {"host_s": [], "all_s": []}
    try:
        add_nodes(home, env, count)
        for r in range(rounds):
            got = one_quit(home, env, count)
            for key in times:
                times[key].append(got[key])
            print(f"  round {r + 1}/{rounds}: host {got['host_s']:.3f} s, all {got['all_s']:.3f} s", file=sys.stderr)
    finally:
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"rounds": rounds, "nodes": count, **{k: summary(v) for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10, help="quits (default 10)")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--name", default="quit", help="results file name (default quit)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    _rig.compile_checkout()  # nodes run with bytecode, as from an installed copy
    result = {"loadavg_at_start": os.getloadavg(), **run(args.n, args.nodes)}
    headers = ["measure", "min", "p50", "p90", "max", "goal"]
    labels = {"host_s": "SIGTERM -> host gone (s)", "all_s": "SIGTERM -> host, nodes and pumps gone (s)"}
    rows = [[labels[k], result[k]["min"], result[k]["p50"], result[k]["p90"], result[k]["max"],
             f"<= {GOAL_S}" if k == "all_s" else ""] for k in labels]
    print(f"\nquit with {args.nodes} running reference nodes, {args.n} quits")
    print(table(headers, rows, digits=3))
    p50 = result["all_s"]["p50"]
    result["goals"] = [f"quit -> nothing left: p50 {p50:.3f} s; goal <= {GOAL_S} s  "
                       + ("MET" if p50 <= GOAL_S else "MISSED")]
    print(result["goals"][0])
    result["markdown"] = markdown(headers, rows, digits=3)
    result["loadavg_at_end"] = os.getloadavg()
    if not args.no_save:
        print(f"wrote {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
