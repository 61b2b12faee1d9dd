"""Where a respawn's time goes inside the host: a breakdown, and a profile if asked.

    .venv/bin/python bench/profile_respawn.py [-n 30] [--child node|sleep] [--pyinstrument]

Runs the real Host in this process (real keyring, real orchestrator, real
files), adds one node, SIGKILLs its child N times and timestamps the steps of
the respawn path by wrapping the engine's methods: kill -> exit noticed ->
exit pass begins -> the start decided -> orchestrator.spawn -> Popen -> the child's
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
    ("the start decided", "Starter.start:enter"),
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
    ("warm: parked child taken", "forks.take:exit"),
    ("launch returns", "Orchestrator._launch:exit"),
    ("spawn returns", "Orchestrator.spawn:exit"),
    ("the start returns", "Starter.start:exit"),
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
    wrap(forks, "take", "forks.take")
    from cadre_desktop.host.local import standby

    wrap(standby, "hand_over", "standby.hand_over")
    wrap(procs, "spawn", "procs.spawn")
    wrap(Starter, "start", "Starter.start")


def _pid(host, node_id: str) -> int:
    return next(h.pid for h in host.driver.handles_for(node_id) if h.alive)


#: Every wait of a round is bounded: a round whose new child does not answer within ROUND_S is
#: counted as failed (never waited on until the tool's own timeout); the next round waits up to
#: SETTLE_S for the node to answer again and for the warm start to be back (a fork server with
#: its parked child), so no round goes cold because the last one left nothing loaded.
ROUND_S = 5.0
SETTLE_S = 20.0


def _answered(port: int, marks: dict[str, int], old_pid: int) -> None:
    """On a thread: the first 200 from the new child (the old one is dead by then), within ROUND_S."""
    deadline = time.monotonic() + ROUND_S
    while os.path.exists(f"/proc/{old_pid}/cmdline") and time.monotonic() < deadline:
        try:
            if open(f"/proc/{old_pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except OSError:
            break
        time.sleep(0.0002)
    t = _rig.wait_status(port, max(0.0, deadline - time.monotonic()))
    if t is not None:
        marks["answering"] = t


def _warm_back(host) -> bool:
    """The warm start the next kill will use is in place: a fork server, and its parked child where it parks."""
    pool = host.driver.standby
    server = pool.ready if pool is not None else None
    return server is not None and (not server.forks or not pool.parking.enabled or pool.parking.parked(server))


def _way(marks: dict[str, int]) -> str:
    """How the round's node was started: the parked child taken, a fork, the standby handed over, or cold."""
    for key, way in (("forks.take:enter", "parked"), ("forks.fork:enter", "forked"),
                     ("standby.hand_over:enter", "handed over")):
        if key in marks:
            return way
    return "cold"


async def _settle(host, node_id: str, port: int | None, warm: bool) -> bool:
    """Before a round, bounded: the node answering, a live handle, and with warm starts the standby back."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        alive = any(h.alive for h in host.driver.handles_for(node_id))
        answering = port is None or await asyncio.to_thread(_rig.status_ok, port)
        if alive and answering and (not warm or _warm_back(host)):
            return True
        await asyncio.sleep(0.02)
    return False


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
        respawn_max_attempts=1_000_000, probe_interval_ms=60_000 if child == "sleep" else 200,
        warm_standby=warm,
    )
    host = Host(resolve_paths({"CADRE_DESKTOP_HOME": str(home)}), settings, serve_control_api=False)
    await host.start()
    marks: dict[str, int] = {}
    instrument(marks)
    rows: list[dict[str, float]] = []
    ways: list[str] = []
    failed = 0
    profiler = None
    try:
        view = await host.add_node("profile")
        port_polled = view.api_port if child == "node" else None
        if profile:
            from pyinstrument import Profiler
            profiler = Profiler(interval=0.001, async_mode="disabled")
            profiler.start()
        for _ in range(rounds):
            await asyncio.sleep(gap)
            if not await _settle(host, view.id, port_polled, warm):
                raise SystemExit(f"profile_respawn: the node did not answer again (or the warm start was not back) "
                                 f"within {SETTLE_S:.0f} s; stopped after {len(rows)} rounds")
            before = _rig.read_stamps(stamps)
            old = _pid(host, view.id) if warm else before[-1][0]
            marks.clear()
            answered = None
            if child == "node":
                assert view.api_port is not None
                answered = asyncio.create_task(asyncio.to_thread(_answered, view.api_port, marks, old))
            marks["kill"] = time.monotonic_ns()
            os.kill(old, signal.SIGKILL)
            deadline = time.monotonic() + ROUND_S
            while "Orchestrator.spawn:exit" not in marks and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            if answered is not None:
                await answered
            if "Orchestrator.spawn:exit" not in marks or (child == "node" and "answering" not in marks):
                failed += 1
                print(f"  a round's respawn did not answer within {ROUND_S:.0f} s ({failed} so far)")
                continue
            after = _rig.read_stamps(stamps)
            if len(after) > len(before):
                marks["stamp"] = after[len(before)][1]
            rows.append({label: (marks[key] - marks["kill"]) / 1e6 for label, key in STEPS[1:] if key in marks})
            ways.append(_way(marks))
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
    print("how each round's node started: " + ", ".join(f"{w} {ways.count(w)}" for w in sorted(set(ways))))
    return {"rounds": rounds, "child": child, "warm_standby": warm, "gap_s": gap, "ms_after_kill": steps,
            "failed_rounds": failed, "ways": {w: ways.count(w) for w in sorted(set(ways))}, "each_round": rows}


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
