"""The house's walks (issue 34): which functions of cadre_desktop a crash, a pause and a node's own hold pass.

    .venv/bin/python bench/walks.py [--list] [--json FILE]

Runs the real Host in this process (the local driver, the reference node as its child, on
127.0.0.1, in a temporary home with the tests' file keyring, no run-condition sources, warm
starts off), adds one node and walks it through three paths:

- crash: its child is SIGKILLed; from the exit told to the supervisor (its exit listener) to
  the driver's start entered for the new child;
- pause: a person's pause, POST /api/nodes/<id>/pause on the control API; from the control
  API's handler to the driver's stop returning (the child stopped);
- hold: the node is asked (POST /host/run with its host token) to sleep for an hour: it
  writes run.json and exits with code 0; from the exit told to the supervisor to the
  lifecycle's apply of the HOLD change entered (the one writer of every transition, whose own
  steps are the same for all of them: as the crash ends at the driver's start entered).

What is counted (bench/_walk_trace.py records it): every Python function entered (profile
"call" events: sys.setprofile, threading.setprofile for the threads) whose file is under
cadre_desktop/, from the start marker to the end marker, both included, on the walk's own
line of causation: the start marker sets a context variable that the tasks, callbacks and
`asyncio.to_thread` calls made from inside inherit, so the probe, the sweep or another task
running meanwhile are not counted, and work handed to a thread without it (the records'
writer) is not followed. Not counted: a coroutine or generator resumed (only its first entry
is a call), comprehensions and generator expressions (read as part of their function), and
functions reached only through the standard library's logging or through test or benchmark
code (a log handler is not a step a reader takes).

Reported per walk: the distinct functions passed, the distinct files, and the returns to a
file already left (walking the files of successive calls: each change of file to one that was
visited earlier and then left counts one), with the ordered list of "module:function" (first
entry of each). The same three figures are given for the walk's spine too: the walk without
what the event bus's listeners do (ASIDE), and for the reader's walk ("reader" in --json):

- the causal path: the calls of cadre_desktop on the stack when the end marker is entered (each
  call's caller is the nearest recorded frame below it, by the frame's identity: f_back), and
  where the first of them is the first frame of a task, a callback or an `asyncio.to_thread`
  function, the stack of the call that made it (Tracer.watch wraps the loop's create_task,
  call_soon, call_soon_threadsafe, call_later, call_at and asyncio.to_thread while a walk is on),
  and so on back to the start marker ("reaches_start" says whether it does);
- the reader's walk: the path and, for each call on it, the calls it made itself, one level
  down (its callees, and the tasks, callbacks and threads it made in its own frame), entered and
  come back before the path went on from it (to its next call on the path, or to the making of
  the task that carries the path on; the end call's own, up to the walk's end). Counted in call
  order as the whole walk is (functions, files, returns); ">" marks the path in --list.

The markers are the table MARKERS below
("module:qualname", wrapped before the host is made): when the code moves, change them there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _walk_trace import Call, Marker, Recording, Tracer

ROOT = Path(__file__).resolve().parents[1]

#: walk -> (start marker, end marker). The one table to adapt when the code moves.
MARKERS: dict[str, tuple[Marker, Marker]] = {
    "crash": (Marker("cadre_desktop.host.core.supervision.supervisor:Supervisor._on_exit"),
              Marker("cadre_desktop.host.local.orchestrator:Orchestrator.start", "enter")),
    "pause": (Marker("cadre_desktop.host.edges.control:ControlServer._pause_node"),
              Marker("cadre_desktop.host.local.orchestrator:Orchestrator.stop", "return")),
    "hold": (Marker("cadre_desktop.host.core.supervision.supervisor:Supervisor._on_exit"),
             Marker("cadre_desktop.host.core.records.lifecycle:Lifecycle.apply", "enter", ("change", "HOLD"))),
}

#: Functions whose callees are set aside (counted apart, as "the spine" without them): the host's
#: event bus, whose listeners (history, views, the probe's watch, the control API's stream)
#: observe a walk rather than take its steps. The function itself is a step.
ASIDE: tuple[str, ...] = ("cadre_desktop.host.core.events:EventBus.emit",)

#: The issue's targets: (functions at most, returns at most).
TARGETS: dict[str, tuple[int, int]] = {"crash": (15, 5), "pause": (12, 3), "hold": (12, 3)}

WALK_S = 20.0  # each walk reaches its end marker within this
READY_S = 30.0  # a child answers within this


# -- counting ------------------------------------------------------------------------------------

@dataclass
class Counts:
    functions: list[tuple[str, str]]  # (file, function), in the order of their first entry
    files: list[str]  # in the order of their first entry
    returns: int  # returns to a file already left
    reentries: dict[str, int]  # per file, how many of those returns went to it


def count(steps: Sequence[tuple[str, str]]) -> Counts:
    """Distinct functions, distinct files and returns to a file already left, of a sequence of
    calls given as (file, function)."""
    left: set[str] = set()
    current: str | None = None
    returns: Counter[str] = Counter()
    for file, _ in steps:
        if file == current:
            continue
        if current is not None:
            left.add(current)
        if file in left:
            returns[file] += 1
        current = file
    return Counts(functions=list(dict.fromkeys(steps)), files=list(dict.fromkeys(f for f, _ in steps)),
                  returns=sum(returns.values()), reentries=dict(returns.most_common()))


def module_of(path: str) -> str:
    """cadre_desktop/host/local/orchestrator.py -> cadre_desktop.host.local.orchestrator."""
    parts = list(Path(os.path.relpath(path, ROOT)).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def file_walk(steps: Sequence[tuple[str, str]]) -> list[str]:
    """The files of successive calls, a run of one file said once."""
    out: list[str] = []
    for file, _ in steps:
        if not out or out[-1] != file:
            out.append(file)
    return out


def causal_path(calls: Sequence[Call], end: int) -> list[Call]:
    """The end call and what it was made from, back to the walk's start: its callers (the frames on
    the stack) and, at the first frame of a task, a callback or a thread, the calls that made it."""
    path: list[Call] = []
    at: int | None = end
    while at is not None and all(c.index != at for c in path):
        call = calls[at]
        path.append(call)
        at = call.parent if call.parent is not None else call.hop
    return path[::-1]


def reader_walk(calls: Sequence[Call], end: int, end_clock: int) -> tuple[list[Call], list[Call]]:
    """(the causal path, the reader's walk): the path and, for each call on it, the calls it made
    itself (one level down: its callees, and the tasks, callbacks and threads it made) that came
    back before the path went on from it (to its next call, or to the task or callback that
    carries it on), in the order they were entered. The end call's own callees count up to
    `end_clock` (a walk that ends at a return)."""
    path = causal_path(calls, end)
    cut: dict[int, int] = {}
    for here, there in zip(path, path[1:]):
        went_on = there.entered if there.parent == here.index else there.hop_at
        cut[here.index] = went_on if went_on is not None else there.entered
    cut[path[-1].index] = end_clock
    on_path = {c.index for c in path}
    walk = list(path)
    for call in calls:
        if call.index in on_path:
            continue
        caller = call.parent if call.parent is not None else call.hop if call.hop_exact else None
        if caller is None or caller not in cut:
            continue
        if call.parent is None and (call.hop_at is None or call.hop_at >= cut[caller]):
            continue  # a task or callback made after the path went on
        if call.entered < cut[caller] and call.returned is not None and call.returned < cut[caller]:
            walk.append(call)
    return path, sorted(walk, key=lambda c: c.entered)



# -- the scenario ----------------------------------------------------------------------------------

async def _until(what: str, check: Callable[[], Any], timeout: float, poll: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(poll)
    raise TimeoutError(f"walks: {what} within {timeout:.0f} s")


async def _walked(tracer: Tracer, rec: Recording) -> None:
    start, end = MARKERS[rec.name]
    try:
        await _until(f"the {rec.name} walk reached its end", lambda: rec.done, WALK_S, poll=0.005)
    except TimeoutError:
        marker = end if rec.began_at is not None else start
        raise TimeoutError(f"walks: the {rec.name} walk never reached {marker.target} ({marker.at}) within {WALK_S:.0f} s: "
                           "is it still called through that name? (a function imported by name elsewhere is not "
                           "wrapped there; name the method or the place it is looked up in MARKERS)") from None


async def _ready_pid(host: Any, node_id: str, not_pid: int | None = None) -> int:
    def check() -> int | None:
        view = host.get_node(node_id)
        return view.pid if view.ready and view.pid and view.pid != not_pid else None
    pid: int = await _until(f"node {node_id} running and answering", check, READY_S)
    return pid


def _host_token(pid: int) -> str:
    """The token the host gave this child (node contract §1), from its environment."""
    for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if entry.startswith(b"CADRE_HOST_TOKEN="):
            return entry.split(b"=", 1)[1].decode()
    raise RuntimeError(f"walks: child {pid} has no CADRE_HOST_TOKEN")


def _post(url: str, token: str, body: dict[str, Any]) -> int:
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(resp.status)


def _make_host(home: Path) -> Any:
    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.host.host import Host
    from cadre_desktop.paths import resolve_paths
    from cadre_desktop.settings import Settings
    from tests.support import port_blocks
    from tests.support.keyrings import FILE_ENV, FileKeyring

    os.environ[FILE_ENV] = str(home / "keyring.json")
    low = port_blocks.take(50, 20000, 30000)
    settings = Settings(bind_host="127.0.0.1", advertise_host="127.0.0.1", port_range=(low, low + 49),
                        warm_standby=False)
    return Host(resolve_paths({"CADRE_DESKTOP_HOME": str(home)}), settings, secrets=SecretStore(FileKeyring()),
                condition_sources=[])


async def _walk_all(tracer: Tracer, host: Any, home: Path, pids: set[int]) -> None:
    from tests.support.headless import control_request

    node_id = (await host.add_node("walks")).id
    pid = await _ready_pid(host, node_id)
    pids.add(pid)
    # A crash: the child SIGKILLed, until the driver starts the next one.
    rec = tracer.arm("crash")
    os.kill(pid, signal.SIGKILL)
    await _walked(tracer, rec)
    pid = await _ready_pid(host, node_id, not_pid=pid)
    pids.add(pid)
    # A person's pause, over the control API.
    rec = tracer.arm("pause")
    status, body = await asyncio.to_thread(control_request, home, "POST", f"/api/nodes/{node_id}/pause", {})
    if status != 200:
        raise RuntimeError(f"walks: the pause answered {status}: {body}")
    await _walked(tracer, rec)
    await host.resume_node(node_id)
    pid = await _ready_pid(host, node_id, not_pid=pid)
    pids.add(pid)
    # The node's own hold: asked over its host-token API, it writes run.json and exits with code 0.
    wake_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    port = host.get_node(node_id).api_port
    rec = tracer.arm("hold")
    status = await asyncio.to_thread(_post, f"http://127.0.0.1:{port}/host/run", _host_token(pid),
                                     {"state": "sleeping", "wake_at": wake_at, "reason": "walks: an hour off"})
    if status != 202:
        raise RuntimeError(f"walks: POST /host/run answered {status}")
    await _walked(tracer, rec)


async def run(tracer: Tracer, budget_s: float = 50.0) -> None:
    home = Path(tempfile.mkdtemp(prefix="cadre-walks-"))
    pids: set[int] = set()
    host = None
    try:
        async with asyncio.timeout(budget_s):
            tracer.watch(asyncio.get_running_loop())
            host = _make_host(home)
            await host.start()
            await _walk_all(tracer, host, home, pids)
    finally:
        tracer.live = False
        tracer.unwatch()
        try:
            if host is not None:
                async with asyncio.timeout(20):
                    await host.stop(stop_nodes=True)
        finally:
            for pid in pids:  # whatever the stop left (it leaves nothing when it ends well)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            shutil.rmtree(home, ignore_errors=True)


# -- the report --------------------------------------------------------------------------------

def short(path: str) -> str:
    return os.path.relpath(path, ROOT / "cadre_desktop")


def name_of(step: tuple[str, str]) -> str:
    return f"{module_of(step[0])}:{step[1]}"


def figures(name: str, steps: Sequence[tuple[str, str]]) -> dict[str, Any]:
    counts = count(steps)
    most, most_returns = TARGETS[name]
    return {
        "functions": len(counts.functions), "files": len(counts.files), "returns": counts.returns, "calls": len(steps),
        "met": len(counts.functions) <= most and counts.returns <= most_returns,
        "reentries": {short(f): n for f, n in counts.reentries.items()},
        "order": [name_of(s) for s in counts.functions],
        "file_walk": [short(f) for f in file_walk(steps)],
    }


def reader_figures(name: str, rec: Recording) -> dict[str, Any]:
    """The reader's walk of a recording (see reader_walk), counted as the whole walk is."""
    if rec.end_call is None or rec.end_clock is None:
        return {"functions": None, "files": None, "returns": None, "met": False, "reaches_start": False,
                "path": [], "order": [], "sequence": [], "file_walk": [], "reentries": {}}
    path, walk = reader_walk(rec.calls, rec.end_call, rec.end_clock)
    steps = [(c.file, c.function) for c in walk]
    out = figures(name, steps)
    del out["calls"]
    on_path = {c.index for c in path}
    return {**out, "reaches_start": path[0].index == 0,
            "path": [name_of((c.file, c.function)) for c in path],
            "path_files": len(dict.fromkeys(c.file for c in path)),
            "sequence": [("> " if c.index in on_path else "  ") + name_of((c.file, c.function)) for c in walk]}


def result(tracer: Tracer) -> dict[str, Any]:
    walks: dict[str, Any] = {}
    for name, rec in tracer.walks.items():
        most, most_returns = TARGETS[name]
        walks[name] = {
            "start": MARKERS[name][0]._asdict(), "end": MARKERS[name][1]._asdict(),
            "target": {"functions": most, "returns": most_returns},
            **figures(name, rec.steps),
            "sequence": [name_of(s) for s in rec.steps],
            "spine": figures(name, [s for s, aside in zip(rec.steps, rec.aside) if not aside]),
            "reader": reader_figures(name, rec),
        }
    return walks


def commit() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "cadre_desktop"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' +changes in cadre_desktop/' if dirty else ''}"


def show(walks: dict[str, Any], listing: bool) -> None:
    from _report import table

    rows = []
    for name, w in walks.items():
        spine, reader = w["spine"], w["reader"]
        rows.append([name, w["functions"], w["files"], w["returns"], spine["functions"], spine["files"], spine["returns"],
                     reader["functions"], reader["files"], reader["returns"],
                     f"{w['target']['functions']} / {w['target']['returns']}", "met" if w["met"] else "not met",
                     "met" if reader["met"] else "not met",
                     ", ".join(f"{f} {n}" for f, n in list(w["reentries"].items())[:3])])
    print(table(["walk", "functions", "files", "returns", "spine fn", "files", "returns", "reader fn", "files", "returns",
                 "target fn / ret", "all", "reader", "most returned to"], rows))
    print("(spine: the same walk without what the event bus's listeners do; ASIDE in bench/walks.py)")
    print("(reader: the causal path to the end marker, through the tasks and callbacks that carry it, and what each "
          "call on it calls itself before the path goes on)")
    for name, w in walks.items():
        if not w["reader"]["reaches_start"]:
            print(f"walks: the {name} walk's causal path does not reach its start marker (a hop not followed)")
    if not listing:
        return
    for name, w in walks.items():
        aside = set(w["order"]) - set(w["spine"]["order"])
        print(f"\n{name}: {w['functions']} functions in {w['files']} files, {w['returns']} returns "
              f"({w['calls']} calls; * marks a function only the event bus's listeners reach)")
        for i, fn in enumerate(w["order"], 1):
            print(f"  {i:3}. {'*' if fn in aside else ' '} {fn.removeprefix('cadre_desktop.')}")
        print("  files, call after call: " + " > ".join(w["file_walk"]))
        print("  the spine's files: " + " > ".join(w["spine"]["file_walk"]))
    for name, w in walks.items():
        r = w["reader"]
        print(f"\n{name}, the reader's walk: {r['functions']} functions in {r['files']} files, {r['returns']} returns; "
              f"the causal path {len(r['path'])} calls in {r.get('path_files')} files (> marks it, call order)")
        for i, fn in enumerate(r["sequence"], 1):
            print(f"  {i:3}. {fn[:2]}{fn[2:].removeprefix('cadre_desktop.')}")
        print("  files, call after call: " + " > ".join(r["file_walk"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print each walk's functions, in order, and its files")
    parser.add_argument("--json", metavar="FILE", type=Path, help="write the result here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    logging.basicConfig(level=logging.ERROR)
    tracer = Tracer(MARKERS, ASIDE)
    tracer.install()
    started, load_before = time.monotonic(), os.getloadavg()
    try:
        asyncio.run(run(tracer))
    except (TimeoutError, RuntimeError, OSError) as exc:
        sys.exit(str(exc) if str(exc).startswith("walks:") else f"walks: {type(exc).__name__}: {exc}")
    finally:
        tracer.uninstall()
    walks = result(tracer)
    show(walks, args.list)
    if args.json:
        from _report import machine

        doc = {"what": "bench/walks.py: the functions of cadre_desktop a crash, a pause and a node's own hold pass",
               "commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine(),
               "seconds": round(time.monotonic() - started, 1), "load": [load_before, os.getloadavg()], "walks": walks}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    main()
