"""Start-up: launch -> tray icon shown, and launch -> control API answering.

    .venv/bin/python bench/startup.py [-n 10] [--nodes 0] [--running]

Runs alternate between the tray app (`python -m cadre_desktop`, under a fresh
Xvfb with trayer as the system tray for every run) and the headless host
(`python -m cadre_desktop --headless`). Each run launches the program and polls,
from this process:

  tray icon shown    trayer's panel widens to hold an icon (xdotool, every ~20 ms)
  API answering      control.json names the new pid and GET /api/nodes answers 200

then stops it with SIGTERM. The keyring is a real gnome-keyring. The home is
empty by default; `--nodes N` first adds N nodes to it, so every launch also
reads N claim secrets and respawns N nodes; with `--running` the home keeps its nodes
running on quit (`keep_nodes_running_on_quit`), so every launch finds N nodes running and
re-attaches to them, as after a restart of the tray app. Writes bench/results/startup.json
(or `--name`).
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
import urllib.error
import urllib.request
from pathlib import Path

import _rig
from _report import ROOT, markdown, summary, table, write_result

GOAL_S = 1.5
POLL_S = 0.005


def api_answers(home: Path, pid: int) -> bool:
    try:
        ctl = json.loads((home / "control.json").read_text())
        if ctl.get("pid") != pid:
            return False
        req = urllib.request.Request(ctl["url"] + "/api/nodes", headers={"Authorization": f"Bearer {ctl['token']}"})
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status == 200
    except (OSError, ValueError, KeyError, urllib.error.URLError):
        return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def launch_headless(home: Path, env: dict) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop", "--headless"], env=env, cwd=home,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = t0 + 30
        while time.monotonic() < deadline and proc.poll() is None:
            if api_answers(home, proc.pid):
                return {"api_s": time.monotonic() - t0}
            time.sleep(POLL_S)
        raise RuntimeError(f"the headless host did not answer (exit code {proc.poll()})")
    finally:
        stop(proc)


def launch_tray(home: Path, env: dict, work: Path) -> dict:
    from tests.support.e2e.desktop import Desktop

    desktop = Desktop(work).start()
    try:
        run_env = desktop.env(**env)
        log = open(work / "app.log", "ab")
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop"], env=run_env, cwd=home, stdout=log, stderr=log)
        try:
            out: dict = {}
            deadline = t0 + 30
            while time.monotonic() < deadline and proc.poll() is None and len(out) < 2:
                if "api_s" not in out and api_answers(home, proc.pid):
                    out["api_s"] = time.monotonic() - t0
                if "icon_s" not in out:
                    panel = desktop.window_id("--classname", "panel")
                    if panel and desktop.geometry(panel).width >= 16:
                        out["icon_s"] = time.monotonic() - t0
                time.sleep(POLL_S)
            if len(out) < 2:
                raise RuntimeError(f"the tray app did not come up ({out}, exit code {proc.poll()}); see {work}/app.log")
            return out
        finally:
            stop(proc)
            log.close()
    finally:
        desktop.stop()


def add_nodes(home: Path, env: dict, count: int) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop", "--headless"], env=env, cwd=home,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not api_answers(home, proc.pid):
            if time.monotonic() > deadline:
                raise RuntimeError("the host for adding nodes did not come up")
            time.sleep(0.05)
        ctl = json.loads((home / "control.json").read_text())
        for i in range(count):
            req = urllib.request.Request(ctl["url"] + "/api/nodes", method="POST", data=json.dumps({"name": f"s{i}"}).encode(),
                                         headers={"Authorization": f"Bearer {ctl['token']}",
                                                  "Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=60).read()
    finally:
        stop(proc)


def kill_leftovers(work: Path) -> int:
    """The nodes and log keepers kept running under the bench's homes; how many were killed.
    A node names its home in its environment, a keeper (started with a clean one) on its command line."""
    import psutil

    killed = 0
    for proc in psutil.process_iter(["environ", "cmdline"]):
        try:
            env = proc.info["environ"] or {}
            named = [env.get("CADRE_NODE_DIR", ""), env.get("CADRE_DESKTOP_HOME", ""), *(proc.info["cmdline"] or [])]
            if proc.pid != os.getpid() and any(str(work) in text for text in named):
                proc.kill()
                killed += 1
        except psutil.Error:
            continue
    return killed


def run(rounds: int, nodes: int, running: bool = False) -> dict:
    from tests.support.e2e.desktop import missing_tools

    work = Path(tempfile.mkdtemp(prefix="cadre-bench-startup-"))
    session, keyring_env = _rig.start_secret_service()
    base = random.randrange(20000, 31000, 400)
    homes = {}
    envs = {}
    for mode in ("tray", "headless"):
        home = work / mode
        home.mkdir()
        (home / "settings.json").write_text(json.dumps(
            {"bind_host": "127.0.0.1", "advertise_host": "127.0.0.1",
             # two ports a node: room for 80 nodes per home
             "port_range": [base + (0 if mode == "tray" else 200), base + (159 if mode == "tray" else 359)],
             **({"keep_nodes_running_on_quit": True} if running else {})}))
        homes[mode] = home
        env = {**os.environ, **keyring_env, "CADRE_DESKTOP_HOME": str(home), "PYTHONPATH": str(ROOT)}
        env.pop("QT_QPA_PLATFORM", None)
        envs[mode] = env
    tray_ok = not missing_tools()
    times: dict[str, list[float]] = {"tray_icon_s": [], "tray_api_s": [], "headless_api_s": []}
    try:
        if nodes:
            for mode in homes:
                add_nodes(homes[mode], envs[mode], nodes)
        for r in range(rounds + 1):  # the first round warms the disk cache and is not counted
            order = ["tray", "headless"] if r % 2 == 0 else ["headless", "tray"]
            for mode in order:
                if mode == "tray" and not tray_ok:
                    continue
                got = launch_tray(homes[mode], envs[mode], work) if mode == "tray" else launch_headless(homes[mode], envs[mode])
                if r == 0:
                    continue
                if mode == "tray":
                    times["tray_icon_s"].append(got["icon_s"])
                    times["tray_api_s"].append(got["api_s"])
                else:
                    times["headless_api_s"].append(got["api_s"])
                time.sleep(0.5)
            if r:
                print(f"  round {r}/{rounds} done", file=sys.stderr)
    finally:
        kill_leftovers(work)
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"rounds": rounds, "nodes": nodes, "nodes_running": running, "tray_tools": tray_ok,
            **{key: summary(values) for key, values in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=0, help="nodes in the home at every launch (default 0)")
    parser.add_argument("--running", action="store_true",
                        help="the nodes keep running between launches: each launch re-attaches to them")
    parser.add_argument("--name", default="startup", help="results file name (default startup)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    _rig.compile_checkout()  # nodes run with bytecode, as from an installed copy
    result = {"loadavg_at_start": os.getloadavg(), **run(args.n, args.nodes, args.running)}
    headers = ["measure", "min", "p50", "p90", "max", "goal"]
    labels = {"tray_icon_s": "tray app: launch -> icon in the tray (s)",
              "tray_api_s": "tray app: launch -> control API answering (s)",
              "headless_api_s": "headless: launch -> control API answering (s)"}
    rows = [[labels[k], result[k]["min"], result[k]["p50"], result[k]["p90"], result[k]["max"], f"<= {GOAL_S}"]
            for k in labels]
    print(f"\nstart-up, {args.n} launches each, {args.nodes} node(s) in the home"
          + (", running" if args.running else ""))
    print(table(headers, rows, digits=3))
    result["goals"] = []
    for key, label in labels.items():
        p50 = result[key]["p50"]
        if p50 is not None:
            result["goals"].append(f"{label.split(' (')[0]}: p50 {p50:.3f} s; goal <= {GOAL_S} s  "
                                   + ("MET" if p50 <= GOAL_S else "MISSED"))
    for line in result["goals"]:
        print(line)
    result["markdown"] = markdown(headers, rows, digits=3)
    result["loadavg_at_end"] = os.getloadavg()
    if not args.no_save:
        print(f"wrote {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
