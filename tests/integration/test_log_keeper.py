"""One log keeper per home writes every node's output under its cap: no process per node for logs,
a host restart keeps capturing, and a keeper that dies is replaced with the gap said in each log."""

from __future__ import annotations

import os
import signal

import psutil

from cadre_desktop.host.local.keeper import socket_path
from tests.support.polling import async_wait_until, wait_until
from tests.support.processes import THIS_OS, gone, read
from tests.support.real_orchestrator import make_orchestrator

CAP = 256 * 1024


def size(path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def home_processes(home) -> list[int]:
    """Every live process on this computer that is there for `home`: its nodes (their work folder
    is in it) and whatever writes its logs (the logs folder is on its command line)."""
    nodes, logs = str(home / "nodes"), str(home / "logs")
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("CADRE_NODE_DIR", "").startswith(nodes) or any(
                    part.startswith(logs) for part in proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return sorted(found)


async def test_nodes_writing_20_mb_s_lines_without_newlines_and_binary_stay_under_the_cap_one_process_each(
        tmp_path, cleanup, monkeypatch):
    orch = make_orchestrator(tmp_path)
    orch.logs.cap = CAP
    await orch.init()
    monkeypatch.setenv("SLEEPER_MODE", "chatty")
    monkeypatch.setenv("SLEEPER_CHATTY_BYTES", str(40 << 20))
    monkeypatch.setenv("SLEEPER_CHATTY_RATE", str(20 << 20))
    kinds = ("lines", "no-newlines", "binary")
    handles = []
    for kind in kinds:
        monkeypatch.setenv("SLEEPER_CHATTY_KIND", kind)
        handles.append(await orch.spawn(kind, {}))
        cleanup.append(handles[-1].pid)
    assert orch.keeper is not None and orch.keeper.pid is not None
    cleanup.append(orch.keeper.pid)
    keeper = psutil.Process(orch.keeper.pid)
    assert not any(k.startswith("CADRE_") for k in keeper.environ()), "the keeper must not look like a node"
    assert os.getsid(keeper.pid) == keeper.pid, "the keeper runs in a session of its own"
    assert home_processes(tmp_path) == sorted([*(h.pid for h in handles), keeper.pid]), \
        "one process per node, and one keeper for the home"
    assert all(h.pump_pid is None and h.log_kept for h in handles)
    logs = [orch.paths.node_log(kind) for kind in kinds]
    peak = 0

    def all_done() -> bool:
        nonlocal peak
        peak = max([peak, *(max(size(p), size(p.with_name(p.name + ".1"))) for p in logs)])
        return all(b"sleeper: chatter done" in read(p)[-200:] for p in logs)
    await async_wait_until(all_done, timeout=90, interval=0.01, what="every chatter's end in its log")
    assert peak <= CAP, f"a log reached {peak} bytes"
    for path in logs:
        for each in (path, path.with_name(path.name + ".1")):
            assert each.stat().st_size <= CAP and each.stat().st_mode & 0o777 == 0o600
    binary = read(logs[2].with_name(logs[2].name + ".1")) + read(logs[2])
    assert binary.count(bytes(range(1, 10))) > 500, "the binary output is in its log as it was written"
    await orch.stop_all()
    orch.close()
    wait_until(lambda: gone(keeper.pid), timeout=10, what="the keeper's end once no node and no host is left")


async def test_a_restarted_host_keeps_capturing_a_node_that_went_on_running(tmp_path, cleanup, monkeypatch):
    monkeypatch.setenv("SLEEPER_MODE", "ticker")
    orch = make_orchestrator(tmp_path)
    await orch.init()
    handle = await orch.spawn("n1", {})
    cleanup.append(handle.pid)
    assert orch.keeper is not None and orch.keeper.pid is not None
    keeper_pid = orch.keeper.pid
    cleanup.append(keeper_pid)
    path = orch.paths.node_log("n1")
    await async_wait_until(lambda: b"sleeper: tick 3\n" in read(path), what="the first ticks")
    orch.close()  # the host goes away; the node and the keeper carry on
    mark = read(path).count(b"\n")
    wait_until(lambda: read(path).count(b"\n") > mark + 5, what="ticks written while no host runs")
    second = make_orchestrator(tmp_path)
    report = await second.init()
    assert [h.id for h in report.attached] == [handle.id]
    assert second.keeper is not None and second.keeper.pid == keeper_pid, "the running keeper was found"
    again = second.get(handle.id)
    assert again is not None and again.log_kept and handle.id in second.keeper.streams
    os.kill(handle.pid, signal.SIGKILL)
    await async_wait_until(lambda: not second.is_running(handle.id), what="the exit seen by the new host")
    await async_wait_until(lambda: second.keeper is not None and handle.id not in second.keeper.streams,
                           what="the stream's end")
    before = size(path)
    await second.remove_node("n1")
    assert before > 0 and not path.exists()
    second.close()
    wait_until(lambda: gone(keeper_pid), timeout=10, what="the keeper's end with no node and no host")


async def test_a_killed_keeper_is_replaced_and_each_log_says_output_may_be_missing(tmp_path, cleanup, monkeypatch):
    monkeypatch.setenv("SLEEPER_MODE", "ticker")
    orch = make_orchestrator(tmp_path)
    await orch.init()
    handles = [await orch.spawn(f"n{i}", {}) for i in range(2)]
    cleanup.extend(h.pid for h in handles)
    assert orch.keeper is not None and orch.keeper.pid is not None
    old = orch.keeper.pid
    paths = [orch.paths.node_log(h.node_id) for h in handles]
    await async_wait_until(lambda: all(b"tick 2\n" in read(p) for p in paths), what="the first ticks")
    os.kill(old, signal.SIGKILL)
    keeper = orch.keeper
    await async_wait_until(lambda: keeper.pid not in (None, old), what="a new keeper")
    assert keeper.pid is not None
    cleanup.append(keeper.pid)

    def after_gap(path) -> bytes:
        head, sep, tail = read(path).partition(b"the log keeper ended at ")
        return tail if sep else b""
    await async_wait_until(lambda: all(after_gap(p).count(b"sleeper: tick") >= 3 for p in paths),
                           what="the gap line, then ticks again, in every log")
    assert all(b"was replaced" in after_gap(p) for p in paths)
    assert all(orch.is_running(h.id) for h in handles), "a keeper's death never touches a node"
    await orch.stop_all()
    orch.close()


async def test_a_node_whose_keeper_ended_while_no_host_ran_has_it_said_in_its_log(tmp_path, cleanup, monkeypatch):
    monkeypatch.setenv("SLEEPER_MODE", "")
    orch = make_orchestrator(tmp_path)
    await orch.init()
    handle = await orch.spawn("n1", {})
    cleanup.append(handle.pid)
    assert orch.keeper is not None and orch.keeper.pid is not None
    keeper_pid = orch.keeper.pid
    path = orch.paths.node_log("n1")
    await async_wait_until(lambda: b"sleeper: ready" in read(path), what="the node's first line")
    orch.close()
    os.kill(keeper_pid, signal.SIGKILL)  # the keeper and the host both gone: the node's pipe has no reader
    wait_until(lambda: gone(keeper_pid), what="the keeper's end")
    second = make_orchestrator(tmp_path)
    report = await second.init()
    assert [h.id for h in report.attached] == [handle.id]
    assert b"its output is no longer captured" in read(path)
    assert not socket_path(orch.paths).exists(), "the killed keeper's socket was left behind"
    await second.stop_node("n1")
    second.close()


async def test_a_child_an_older_build_started_with_its_own_pump_keeps_its_pump_watched(tmp_path, cleanup):
    """Upgrading with nodes running: a re-attached handle whose state.json row names a live pump
    (and the keeper no stream) waits for that pump's end, as before; the keeper is not started."""
    import subprocess
    import sys

    from cadre_desktop.host.local import launch
    from cadre_desktop.host.local.handles import Handle
    from cadre_desktop.host.local.keeper import LogKeeper
    from cadre_desktop.host.local.nodelogs import NodeLogs
    from cadre_desktop.paths import Paths

    paths = Paths(tmp_path, tmp_path, tmp_path / "logs")
    keeper = LogKeeper(paths, THIS_OS)
    pump = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    cleanup.append(pump.pid)
    child = THIS_OS.read_identity(os.getpid())
    assert child is not None
    handle = Handle("n1.old", "n1", os.getpid(), child, 1, 2, "", pump_pid=pump.pid,
                    pump_identity=THIS_OS.read_identity(pump.pid))
    launch.attach_log(handle, keeper, NodeLogs(paths), THIS_OS)
    assert handle._cancel_pump_watch is not None and not handle.log_kept and not handle._log_done.is_set()
    assert keeper.pid is None, "no keeper is started for a child that has a pump"
    pump.kill()
    await async_wait_until(handle._log_done.is_set, what="the pump's end heard")
    assert not paths.node_log("n1").exists(), "no note: the pump writes that log"
    handle._cancel_pump_watch()
