"""Idle footprint: what hosting 10 nodes costs when nothing happens.

    .venv/bin/python bench/idle.py [--nodes 10] [--seconds 60] [--only headless,tray,supervisord,pm2]
                                   [--baseline PATH]

Four supervisors, each with 10 reference nodes, run side by side: our headless
host and our tray app (under Xvfb with trayer as the system tray; the tray app
embeds the same engine), both with default settings, their nodes added through
the control API (claim secrets in a real gnome-keyring); supervisord and pm2
running the same node program for comparison. Once every node answers, the run
settles, then samples for 60 s: RSS (and USS) of the supervising process, its
CPU % of one core, its wake-ups (context switches per second, all threads
summed), and the same for each node. Also times 10 cold starts of the node on
its own (exec -> answering GET /status). Writes bench/results/idle.json.

`--baseline PATH` also runs the tray app of another checkout (say, a worktree of
`main`) beside ours with its own 10 nodes, so a change to the tray is measured
before and after in one run. For every tray app the run also lists the Qt
libraries and plugins it maps, with their resident size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import _rig
import psutil
from _report import ROOT, markdown, summary, table, write_result
from _supervisors import Pm2, Supervisord

from tests.support.headless import HeadlessHost

GOAL_TRAY_RSS_MB = 80.0
GOAL_TRAY_CPU_PCT = 0.2
GOAL_NODE_RSS_MB = 40.0
GOAL_NODE_COLD_MS = 200.0
SETTLE_S = 15.0


def api(home: Path, method: str, path: str, body: dict | None = None) -> dict:
    ctl = json.loads((home / "control.json").read_text())
    req = urllib.request.Request(ctl["url"] + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {ctl['token']}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"{}")


def our_settings(base: int) -> dict:
    """Defaults, except where the nodes listen: loopback, below the ephemeral port range."""
    return {"bind_host": "127.0.0.1", "advertise_host": "127.0.0.1", "port_range": [base, base + 49]}


class Contender(Protocol):
    """What the run asks of each supervisor it compares."""

    name: str

    def start(self) -> None: ...

    def host_pid(self) -> int | None: ...

    def stop(self) -> None: ...


class OurHeadless:
    name = "cadre-desktop --headless"

    def __init__(self, work: Path, base: int, keyring_env: dict) -> None:
        self.host = HeadlessHost(work / "home", keyring_env, our_settings(base))

    def start(self) -> None:
        self.host.start()

    @property
    def home(self) -> Path:
        return self.host.home

    def host_pid(self) -> int:
        assert self.host.proc is not None, "not started"
        return self.host.proc.pid

    def stop(self) -> None:
        self.host.stop()


class OurTray:
    name = "cadre-desktop (tray)"

    def __init__(self, work: Path, base: int, keyring_env: dict, checkout: Path = ROOT,
                 name: str | None = None) -> None:
        from tests.support.e2e.desktop import Desktop, missing_tools

        if missing_tools():
            raise RuntimeError(f"the tray run needs {', '.join(missing_tools())}")
        self.checkout = checkout
        if name:
            self.name = name
        self.work = work
        self.home = work / "home"
        self.home.mkdir(parents=True)
        (self.home / "settings.json").write_text(json.dumps(our_settings(base)))
        self.desktop = Desktop(work)
        self.keyring_env = keyring_env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.desktop.start()
        env = self.desktop.env(**self.keyring_env, CADRE_DESKTOP_HOME=str(self.home),
                               PYTHONPATH=str(self.checkout))
        self.log = open(self.work / "app.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop"], env=env, stdout=self.log,
                                     stderr=self.log, cwd=self.work)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the tray app exited with {self.proc.returncode}; see {self.work / 'app.log'}")
            try:
                if json.loads((self.home / "control.json").read_text()).get("pid") == self.proc.pid:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("the tray app's control API never came up")

    def host_pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.desktop.stop()


def task_switches(pid: int) -> int:
    """Context switches of every thread of the process (psutil reads the main thread only)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/status") as fh:
                    for line in fh:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            total += int(line.split()[1])
            except OSError:
                continue
    except OSError:
        pass
    return total


def rss_by_mapping(pid: int, top: int | None = 8) -> list[tuple[str, float]]:
    """Where a process's RSS lives: the biggest mappings by file (or kind), in MB."""
    sizes: dict[str, int] = {}
    current = "?"
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                head = line.split()
                if not head:
                    continue
                if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                    name = head[5] if len(head) > 5 else "[anon]"
                    current = name.rsplit("/", 1)[-1] if name.startswith("/") else name
                elif head[0] == "Rss:":
                    sizes[current] = sizes.get(current, 0) + int(head[1])
    except OSError:
        return []
    return [(name, kb / 1024) for name, kb in sorted(sizes.items(), key=lambda kv: -kv[1])[:top]]


def qt_libraries(pid: int) -> list[tuple[str, float]]:
    """The Qt libraries, PySide modules and Qt plugins a process maps, with their RSS in MB."""
    return [(name, mb) for name, mb in rss_by_mapping(pid, top=None)
            if name.startswith(("libQt6", "Qt", "libqsvg", "libqxcb", "libqoffscreen", "libcompose"))
            or name.startswith("libq") and name.endswith(".so")]


class Sampler:
    """RSS every second; CPU time and context switches at both ends of the window."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.rss: list[float] = []

    def begin(self) -> None:
        t = self.proc.cpu_times()
        self.cpu0 = t.user + t.system
        self.sw0 = task_switches(self.proc.pid)
        self.t0 = time.monotonic()

    def tick(self) -> None:
        try:
            self.rss.append(self.proc.memory_info().rss / 2**20)
        except psutil.Error:
            pass

    def end(self) -> dict:
        elapsed = time.monotonic() - self.t0
        t = self.proc.cpu_times()
        try:
            full = self.proc.memory_full_info()
            uss, pss = full.uss / 2**20, full.pss / 2**20
        except psutil.Error:
            uss = pss = None
        return {
            "rss_mb": statistics.median(self.rss) if self.rss else None,
            "rss_max_mb": max(self.rss) if self.rss else None,
            "uss_mb": uss,
            "pss_mb": pss,
            "cpu_pct": (t.user + t.system - self.cpu0) / elapsed * 100,
            "wakeups_per_s": (task_switches(self.proc.pid) - self.sw0) / elapsed,
            "threads": self.proc.num_threads(),
            "rss_by_mapping_mb": rss_by_mapping(self.proc.pid),
        }


def node_pids(sup) -> list[int]:
    if isinstance(sup, (OurHeadless, OurTray)):
        return [n["pid"] for n in api(sup.home, "GET", "/api/nodes")["nodes"] if n["pid"]]
    host = psutil.Process(sup.host_pid())
    return [c.pid for c in host.children(recursive=True) if "cadre_desktop.node" in " ".join(c.cmdline())]


def wait_all_ready(sup, nodes: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if isinstance(sup, (OurHeadless, OurTray)):
            views = api(sup.home, "GET", "/api/nodes")["nodes"]
            if len(views) == nodes and all(v["ready"] for v in views):
                return
        else:
            if all(_rig.status_ok(sup.api_port + 2 * i) for i in range(nodes)):
                return
        time.sleep(0.5)
    raise RuntimeError(f"{sup.name}: not all {nodes} nodes answered within {timeout}s")


def cold_starts(work: Path, stamp: Path, port: int, runs: int) -> list[float]:
    env = _rig.node_env("bench-cold", work / "cold-node", port, port + 1)
    times = []
    for _ in range(runs + 1):
        t0 = time.monotonic_ns()
        proc = subprocess.Popen(_rig.node_command(), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        t = _rig.wait_status(port, 30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        if t is not None:
            times.append((t - t0) / 1e6)
        time.sleep(0.3)
    return times[1:]  # the first run creates the node's identity


def run(nodes: int, seconds: float, only: set[str] | None, baseline: Path | None = None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cadre-bench-idle-"))
    stamp = _rig.stamp_binary()
    session, keyring_env = _rig.start_secret_service()
    base = random.randrange(20000, 31000, 500)
    candidates: dict[str, Callable[[], Contender]] = {
        "headless": lambda: OurHeadless(work / "headless", base, keyring_env),
        "tray": lambda: OurTray(work / "tray", base + 100, keyring_env),
        "supervisord": lambda: Supervisord(work / "supervisord", stamp, base + 200, count=nodes),
        "pm2": lambda: Pm2(work / "pm2", stamp, base + 300, count=nodes),
    }
    if baseline is not None:
        _rig.compile_checkout(baseline)
        candidates["tray-baseline"] = lambda: OurTray(work / "tray-baseline", base + 150, keyring_env,
                                                      baseline, "cadre-desktop (tray), baseline")
    sups: list[Contender] = [make() for key, make in candidates.items()
            if not only or key in only or (key == "tray-baseline" and "tray" in only)]
    started: list[Contender] = []
    result: dict = {"nodes": nodes, "seconds": seconds, "settle_s": SETTLE_S, "loadavg_at_start": os.getloadavg()}
    try:
        for sup in sups:
            sup.start()
            started.append(sup)
            if isinstance(sup, (OurHeadless, OurTray)):
                for i in range(nodes):
                    api(sup.home, "POST", "/api/nodes", {"name": f"idle {i}"})
        for sup in sups:
            wait_all_ready(sup, nodes)
        print(f"  all nodes answer; settling {SETTLE_S:.0f} s, then sampling {seconds:.0f} s", file=sys.stderr)
        time.sleep(SETTLE_S)
        samplers = {}
        for sup in sups:
            pid = sup.host_pid()
            assert pid is not None, f"{sup.name} has no supervising process to sample"
            samplers[sup.name] = (Sampler(pid), [Sampler(p) for p in node_pids(sup)])
        for host, kids in samplers.values():
            for s in (host, *kids):
                s.begin()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for host, kids in samplers.values():
                for s in (host, *kids):
                    s.tick()
            time.sleep(1.0)
        result["supervisors"] = {}
        for name, (host, kids) in samplers.items():
            per_node = [k.end() for k in kids]
            host_end = host.end()
            if name.startswith("cadre-desktop (tray)"):
                host_end["qt_libraries_mb"] = qt_libraries(host.proc.pid)
            result["supervisors"][name] = {
                "host": host_end,
                "node_count": len(per_node),
                "node_rss_mb": summary([n["rss_mb"] for n in per_node if n["rss_mb"]]),
                "node_uss_mb": summary([n["uss_mb"] for n in per_node if n["uss_mb"]]),
                "node_cpu_pct": summary([n["cpu_pct"] for n in per_node]),
                "node_wakeups_per_s": summary([n["wakeups_per_s"] for n in per_node]),
            }
        versions = {}
        for sup in sups:
            version = getattr(sup, "version", None)
            versions[sup.name] = version() if version else ""
        result["versions"] = versions
    finally:
        for sup in started:
            try:
                sup.stop()
            except Exception as exc:
                print(f"  stopping {sup.name} failed: {exc}", file=sys.stderr)
    try:
        result["cold_start_ms"] = summary(cold_starts(work, stamp, base + 400, 10))
    finally:
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["loadavg_at_end"] = os.getloadavg()
    return result


def report(result: dict) -> tuple[list[str], list[list]]:
    headers = ["supervisor", "RSS (MB)", "USS (MB)", "CPU %", "wake-ups/s", "threads",
               "node RSS p50 (MB)", "node RSS max (MB)", "node CPU % p50", "node wake-ups/s p50"]
    rows = []
    for name, r in result["supervisors"].items():
        h = r["host"]
        rows.append([name, h["rss_mb"], h["uss_mb"], h["cpu_pct"], h["wakeups_per_s"], h["threads"],
                     r["node_rss_mb"]["p50"], r["node_rss_mb"]["max"], r["node_cpu_pct"]["p50"],
                     r["node_wakeups_per_s"]["p50"]])
    return headers, rows


def goals(result: dict) -> list[str]:
    lines = []
    tray = result["supervisors"].get("cadre-desktop (tray)")
    if tray:
        h = tray["host"]
        lines.append(f"tray app RSS {h['rss_mb']:.1f} MB; goal <= {GOAL_TRAY_RSS_MB:.0f} MB  "
                     + ("MET" if h["rss_mb"] <= GOAL_TRAY_RSS_MB else "MISSED"))
        lines.append(f"tray app CPU {h['cpu_pct']:.3f} %; goal <= {GOAL_TRAY_CPU_PCT} %  "
                     + ("MET" if h["cpu_pct"] <= GOAL_TRAY_CPU_PCT else "MISSED"))
    for name, r in result["supervisors"].items():
        if name.startswith("cadre-desktop"):
            worst = r["node_rss_mb"]["max"]
            lines.append(f"node RSS max {worst:.1f} MB ({name}); goal <= {GOAL_NODE_RSS_MB:.0f} MB  "
                         + ("MET" if worst <= GOAL_NODE_RSS_MB else "MISSED"))
            break
    cold = result["cold_start_ms"]["p50"]
    if cold is not None:
        lines.append(f"node cold start p50 {cold:.0f} ms; goal <= {GOAL_NODE_COLD_MS:.0f} ms  "
                     + ("MET" if cold <= GOAL_NODE_COLD_MS else "MISSED"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--only", help="comma-separated subset: headless,tray,supervisord,pm2")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--baseline", type=Path,
                        help="another checkout whose tray app runs beside ours (a before/after in one run)")
    args = parser.parse_args()
    _rig.compile_checkout()  # nodes run with bytecode, as from an installed copy
    result = run(args.nodes, args.seconds, set(args.only.split(",")) if args.only else None,
                 args.baseline.resolve() if args.baseline else None)
    headers, rows = report(result)
    print(f"\nidle: {args.nodes} reference nodes each, sampled {args.seconds:.0f} s after settling")
    print(table(headers, rows))
    for name, r in result["supervisors"].items():
        if r["host"].get("qt_libraries_mb"):
            libs = ", ".join(f"{lib} {mb:.1f}" for lib, mb in r["host"]["qt_libraries_mb"])
            print(f"Qt mapped by {name} (RSS MB): {libs}")
    c = result["cold_start_ms"]
    print(f"node cold start (exec -> answering), {c['n']} runs: p50 {c['p50']:.0f} ms, min {c['min']:.0f}, "
          f"max {c['max']:.0f}")
    result["goals"] = goals(result)
    for line in result["goals"]:
        print(line)
    result["markdown"] = markdown(headers, rows)
    if not args.no_save:
        print(f"wrote {write_result('idle', result)}")


if __name__ == "__main__":
    main()
