"""Where a respawn's time goes inside the host: a breakdown, and a profile if asked.

    .venv/bin/python bench/profile_respawn.py [-n 30] [--child node|sleep] [--pyinstrument]

Runs the real Host in this process (real keyring, real orchestrator, real
files), adds one node, SIGKILLs its child N times and timestamps the steps of
the respawn path by wrapping the engine's methods: kill -> exit noticed ->
exit pass begins -> service.respawn -> orchestrator.spawn -> Popen -> the child's
own stamp -> spawn returns -> record written. Prints the p50 of every step. With
--pyinstrument, also profiles the loop (statistical, 1 ms interval) and prints
the tree. Writes the p50 (and p90) of every step, with the load at both ends,
to bench/results/profile-respawn-<child>.json (`--name` to choose another name).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

import _rig
from _report import load, summary, write_result

STEPS = [
    ("kill", None),
    ("exit noticed", "Orchestrator._on_exit:enter"),
    ("exit listeners + state.json", "Orchestrator._on_exit:exit"),
    ("pass begins", "Supervisor._begin:enter"),
    ("service.respawn", "NodeService.respawn:enter"),
    ("orchestrator.spawn", "Orchestrator.spawn:enter"),
    ("ports chosen", "Orchestrator._choose_ports:exit"),
    ("start's thread picks it up", "spawner._run:enter"),
    ("Popen called", "procs.spawn:enter"),
    ("child stamp", "stamp"),
    ("Popen returns", "procs.spawn:exit"),
    ("start's thread done", "spawner._run:exit"),
    ("output handed to the log keeper", "LogKeeper.watch:exit"),
    ("warm: launch.warm called", "launch.warm:enter"),
    ("warm: fork server answered", "forks.fork:exit"),
    ("launch returns", "Orchestrator._launch:exit"),
    ("spawn returns", "Orchestrator.spawn:exit"),
    ("respawn returns", "NodeService.respawn:exit"),
    ("the new child answers /status", "answering"),
]


def instrument(marks: dict[str, int]) -> None:
    from cadre_desktop.host.core.supervision.starts import Starter
    from cadre_desktop.host.core.supervision.supervisor import Supervisor
    from cadre_desktop.host.local.orchestrator import Orchestrator

    def wrap(owner, attr: str, label: str) -> None:
        fn = getattr(owner, attr)
        if asyncio.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def awrapper(*a, **kw):
                marks.setdefault(f"{label}:enter", time.monotonic_ns())
                try:
                    return await fn(*a, **kw)
                finally:
                    marks.setdefault(f"{label}:exit", time.monotonic_ns())
            setattr(owner, attr, awrapper)
        else:
            @functools.wraps(fn)
            def wrapper(*a, **kw):
                marks.setdefault(f"{label}:enter", time.monotonic_ns())
                try:
                    return fn(*a, **kw)
                finally:
                    marks.setdefault(f"{label}:exit", time.monotonic_ns())
            setattr(owner, attr, wrapper)

    wrap(Orchestrator, "_on_exit", "Orchestrator._on_exit")
    wrap(Orchestrator, "spawn", "Orchestrator.spawn")
    for attr in ("_choose_ports", "_launch", "_tell_exit"):
        wrap(Orchestrator, attr, f"Orchestrator.{attr}")
    from cadre_desktop.host.local.keeper import LogKeeper

    wrap(LogKeeper, "watch", "LogKeeper.watch")
    wrap(Supervisor, "_begin", "Supervisor._begin")
    from cadre_desktop.host.local import spawner
    from cadre_desktop.host.local.system import procs

    wrap(spawner, "_run", "spawner._run")
    from cadre_desktop.host.local import forks, launch

    wrap(launch, "warm", "launch.warm")
    wrap(forks, "fork", "forks.fork")
    wrap(procs, "spawn", "procs.spawn")
    wrap(Starter, "start", "Starter.start")


def _pid(host, node_id: str) -> int:
    return next(h.pid for h in host.driver.handles_for(node_id) if h.alive)


def _answered(port: int, marks: dict[str, int], old_pid: int) -> None:
    """On a thread: the first 200 from the new child (the old one is dead by then)."""
    while os.path.exists(f"/proc/{old_pid}/cmdline"):
        try:
            if open(f"/proc/{old_pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except OSError:
            break
        time.sleep(0.0002)
    t = _rig.wait_status(port, 30)
    if t is not None:
        marks["answering"] = t


async def run(rounds: int, child: str, profile: bool, warm: bool = False, gap: float = 0.3) -> dict:
    from cadre_desktop.host.host import Host
    from cadre_desktop.paths import resolve_paths
    from cadre_desktop.settings import Settings

    home = Path(tempfile.mkdtemp(prefix="cadre-bench-profile-"))
    stamps = home / "stamps.txt"
    stamp = _rig.stamp_binary()
    program = _rig.node_command() if child == "node" else ["sleep", "100000"]
    port = random.randrange(21000, 29000, 2)
    settings = Settings(
        node_command=[str(stamp), str(stamps), *program], bind_host="127.0.0.1", advertise_host="127.0.0.1",
        port_range=(port, port + 1), respawn_backoff_base_ms=1, respawn_backoff_max_ms=1,
        respawn_max_attempts=1_000_000, probe_interval_ms=60_000 if child == "sleep" else 5_000,
        warm_standby=warm,
    )
    host = Host(resolve_paths({"CADRE_DESKTOP_HOME": str(home)}), settings, serve_control_api=False)
    await host.start()
    marks: dict[str, int] = {}
    instrument(marks)
    rows: list[dict[str, float]] = []
    profiler = None
    try:
        view = await host.add_node("profile")
        if child == "node":
            assert view.api_port is not None  # a running node has its port
            await asyncio.to_thread(_rig.wait_status, view.api_port, 30)
        if profile:
            from pyinstrument import Profiler
            profiler = Profiler(interval=0.001, async_mode="disabled")
            profiler.start()
        for _ in range(rounds):
            await asyncio.sleep(gap)
            before = _rig.read_stamps(stamps)
            old = _pid(host, view.id) if warm else before[-1][0]
            marks.clear()
            answered = None
            if child == "node":
                assert view.api_port is not None
                answered = asyncio.create_task(asyncio.to_thread(_answered, view.api_port, marks, old))
            marks["kill"] = time.monotonic_ns()
            os.kill(old, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while "NodeService.respawn:exit" not in marks and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            if answered is not None:
                await answered
            after = _rig.read_stamps(stamps)
            if len(after) > len(before):
                marks["stamp"] = after[len(before)][1]
            rows.append({label: (marks[key] - marks["kill"]) / 1e6 for label, key in STEPS[1:] if key in marks})
            if child == "node":
                assert view.api_port is not None  # a running node has its port
                await asyncio.to_thread(_rig.wait_status, view.api_port, 30)
    finally:
        if profiler is not None:
            profiler.stop()
        await host.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"respawn path, ms after the kill, p50 of {rounds} ({child} child)")
    prev = 0.0
    steps: dict[str, dict] = {}
    for label, _ in STEPS[1:]:
        values = [r[label] for r in rows if label in r]
        if values:
            steps[label] = summary(values)
            p50 = statistics.median(values)
            print(f"  {label:<34}{p50:>9.2f}   (+{p50 - prev:.2f})")
            prev = p50
    if profiler is not None:
        print(profiler.output_text(unicode=False, color=False, show_all=True, short_mode=False))
    return {"rounds": rounds, "child": child, "warm_standby": warm, "gap_s": gap, "ms_after_kill": steps,
            "each_round": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30)
    parser.add_argument("--child", choices=("node", "sleep"), default="sleep")
    parser.add_argument("--pyinstrument", action="store_true")
    parser.add_argument("--warm", action="store_true", help="warm starts on (a fork server's fork per respawn)")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between kills (over 1 s: a lone start each)")
    parser.add_argument("--name", help="results file name (default profile-respawn-<child>)")
    args = parser.parse_args()
    at_start = load()
    _rig.compile_checkout()  # nodes run with bytecode, as from an installed copy
    session, env = _rig.start_secret_service()
    os.environ.update(env)
    try:
        result = asyncio.run(run(args.n, args.child, args.pyinstrument, args.warm, args.gap))
    finally:
        session.stop()
    result["loadavg_at_start"] = at_start
    print(f"wrote {write_result(args.name or f'profile-respawn-{args.child}', result)}")


if __name__ == "__main__":
    main()
