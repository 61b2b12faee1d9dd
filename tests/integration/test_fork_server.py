"""Warm starts that fork: the loaded reference node is a fork server, each start a fork of it,
and every node so made is the host's own child (the host is a subreaper)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from cadre_desktop.host.core.driver import NodeCaps
from cadre_desktop.host.local import forks, parked, proctree
from cadre_desktop.host.local import standby as standby_module
from cadre_desktop.host.local.handles import ExitEvent
from cadre_desktop.host.local.limits import caps
from tests.support.polling import async_wait_until
from tests.support.processes import THIS_OS
from tests.support.warm import REFERENCE, close_and_end, gone, hanging, make, program, ready_standby, status

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork servers need a Linux subreaper")


@pytest.fixture
def crowd(monkeypatch):
    """Every start in a crowd (as in a storm, or a host's first pass): starts fork."""
    monkeypatch.setattr(standby_module, "START_UP_S", 3600.0)


@pytest.fixture
def no_parks(monkeypatch):
    """Fork servers park no child ahead: every start of a crowd sends a fork request."""
    monkeypatch.setattr(parked, "PARK", False)


@pytest.fixture
def orch(tmp_path, crowd):
    made = make(tmp_path)
    yield made
    close_and_end(made)


async def test_each_start_forks_from_the_loaded_standby_and_the_node_is_the_hosts_child(orch):
    exits: list[ExitEvent] = []
    orch.subscribe(exits.append)
    await orch.init()
    server = await ready_standby(orch)
    secret = secrets.token_urlsafe(32)
    first = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secret})
    second = await orch.start("n2", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    assert orch.standby.ready is not None and orch.standby.ready.popen.pid == server, "the fork server was used up"
    for handle, node_id in ((first, "n1"), (second, "n2")):
        assert handle.pid != server
        await async_wait_until(lambda h=handle: status(h.api_port), timeout=15,  # type: ignore[misc]
                               what=f"{node_id} answering")
        assert (status(handle.api_port) or {}).get("node_id") == node_id
        proc = psutil.Process(handle.pid)
        assert proc.ppid() == os.getpid(), "a forked node is not the host's child"
        assert os.getsid(handle.pid) == handle.pid == handle.pgid, "a forked node has no session of its own"
        assert proc.cwd() == str(orch.paths.node_dir(node_id))
    proc = psutil.Process(first.pid)
    assert secret not in " ".join(proc.cmdline()) and secret not in json.dumps(proc.environ())
    assert [m.pid for m in proctree.members(orch.nodes_dir, orch.system, node_id="n1")] == [first.pid], \
        "the host cannot find a forked node among its processes"
    log_text = orch.paths.node_log("n1").read_text()
    assert "starting node n1" in log_text and "listening on" in log_text and secret not in log_text
    # a node names itself in its log's lines ("starting node n2", "node n2 … ready"); a random peer id may hold "n2"
    assert not re.search(r"\bn2\b", log_text), "one node's output reached another's log"
    os.kill(first.pid, signal.SIGKILL)
    await async_wait_until(lambda: exits, timeout=10, what="the forked node's exit")
    assert [(e.node_id, e.returncode) for e in exits] == [("n1", -signal.SIGKILL)], \
        "the exit code of a forked node was not seen"
    assert gone(first.pid) and not psutil.pid_exists(first.pid), "the forked node was not reaped"
    assert not THIS_OS.subreaping(), "a standby that clones made the host a subreaper"
    await orch.stop_all()
    assert gone(second.pid) and gone(server)


async def test_a_standby_that_forks_twice_makes_the_host_a_subreaper_and_its_nodes_are_ours(tmp_path, crowd):
    twice = program(tmp_path, "twice", "    os.environ['CADRE_NODE_TWO_FORKS'] = '1'\n"
                                       "    from cadre_desktop.node import __main__ as m\n"
                                       "    if not m._stand_by():\n        sys.exit(0)\n")
    orch = make(tmp_path, twice)
    exits: list[ExitEvent] = []
    orch.subscribe(exits.append)
    await orch.init()
    try:
        server = await ready_standby(orch)
        handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
        assert handle.pid != server and THIS_OS.subreaping()
        assert psutil.Process(handle.pid).ppid() == os.getpid(), "the orphaned node did not come to the host"
        await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the node answering")
        os.kill(handle.pid, signal.SIGKILL)
        await async_wait_until(lambda: exits, timeout=10, what="its exit")
        assert [e.returncode for e in exits] == [-signal.SIGKILL]
        await orch.stop_all()
    finally:
        orch.close()


async def test_a_storm_of_starts_all_fork_from_one_standby(orch):
    await orch.init()
    server = await ready_standby(orch)
    handles = await asyncio.gather(*(orch.start(f"n{i}", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
                                     for i in range(8)))
    assert all(psutil.Process(h.pid).ppid() == os.getpid() for h in handles), "a start in the storm went cold"
    assert len({h.pid for h in handles}) == 8 and orch.standby.standbys == 1
    assert orch.standby.ready.popen.pid == server
    await async_wait_until(lambda: all(status(h.api_port) for h in handles), timeout=30, what="all answering")
    assert sorted(str((status(h.api_port) or {}).get("node_id")) for h in handles) == sorted(f"n{i}" for i in range(8))
    await orch.stop_all()


async def test_ready_in_counts_from_the_fork(orch):
    import re

    await orch.init()
    server = await ready_standby(orch)
    loaded = psutil.Process(server).create_time()
    await async_wait_until(lambda: time.time() - loaded > 2.0, timeout=15, what="the standby loaded for 2 s")
    await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    log_path = orch.paths.node_log("n1")
    await async_wait_until(lambda: log_path.exists() and "ready in" in log_path.read_text(), timeout=15,
                           what="the node's ready line")
    found = re.search(r"ready in (\d+) ms", log_path.read_text())
    assert found is not None and float(found[1]) < 1500, found
    await orch.stop_all()


async def test_a_fork_server_that_hangs_costs_the_start_nothing(tmp_path, monkeypatch, crowd):
    """It offered forks, read a request and hangs: the start goes on cold within FORK_S, and the
    server is ended and another loaded."""
    monkeypatch.setattr(forks, "FORK_S", 0.5)
    monkeypatch.setattr(standby_module, "FIRST_PAUSE_S", 0.05)
    orch = make(tmp_path, hanging(tmp_path, "hanging_server", b"ready fork"))
    await orch.init()
    try:
        server = await ready_standby(orch)
        assert orch.standby is not None and orch.standby.ready is not None and orch.standby.ready.forks
        started = time.monotonic()
        handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
        took = time.monotonic() - started
        assert handle.pid != server and handle.attempt == 1 and took < forks.FORK_S + 3, took
        assert "hanging_server.py" in " ".join(psutil.Process(handle.pid).cmdline())
        await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the cold start answering")
        await async_wait_until(lambda: gone(server), timeout=10, what="the hung fork server ended")
        await ready_standby(orch, other_than=server)
        await orch.stop_all()
    finally:
        orch.close()


async def test_a_killed_fork_server_is_replaced_and_its_nodes_run_on(orch, monkeypatch):
    monkeypatch.setattr(standby_module, "FIRST_PAUSE_S", 0.05)
    await orch.init()
    server = await ready_standby(orch)
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    os.kill(server, signal.SIGKILL)
    replacement = await ready_standby(orch, other_than=server)
    await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the node answering")
    assert not gone(handle.pid), "a node died with the fork server that made it"
    second = await orch.start("n2", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    assert orch.standby.ready.popen.pid == replacement and psutil.Process(second.pid).ppid() == os.getpid()
    await orch.stop_all()


async def test_without_parks_a_lone_start_takes_the_fork_server_itself_and_a_crowd_forks(tmp_path, monkeypatch):
    """A single crash in a calm host whose program parks no child: the loaded process is handed over
    (it answers sooner than a fork), its output the node's log. Two exits close together make a
    crowd: the next start forks."""
    monkeypatch.setattr(parked, "PARK", False)
    monkeypatch.setattr(standby_module, "START_UP_S", 0.0)
    monkeypatch.setattr(standby_module, "FIRST_PAUSE_S", 0.05)
    orch = make(tmp_path)
    await orch.init()
    try:
        server = await ready_standby(orch)
        pool = orch.standby
        assert pool is not None and pool.ready is not None and pool.ready.forks
        await async_wait_until(lambda: not pool._crowded(), timeout=5, what="the pool calm")
        lone = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
        assert lone.pid == server, "a lone start did not take the standby itself"
        await async_wait_until(lambda: status(lone.api_port), timeout=15, what="the lone start answering")
        log_path = orch.paths.node_log("n1")
        await async_wait_until(lambda: log_path.exists() and "listening on" in log_path.read_text(), timeout=15,
                               what="the handed-over node's output in its log")
        second = await ready_standby(orch, other_than=server)
        pool.note_exit()
        pool.note_exit()
        forked = await orch.start("n2", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
        assert forked.pid != second and pool.ready is not None and pool.ready.popen.pid == second
        assert psutil.Process(forked.pid).ppid() == os.getpid()
        await orch.stop_all()
    finally:
        orch.close()


def _serve(line: bytes, fds: list[int] | None = None, two_forks: bool = False) -> tuple[int, bytes, bytes]:
    """Run the reference node in standby on a socket, send one request, then end of file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    env["CADRE_STANDBY"] = "1"
    if two_forks:
        env["CADRE_NODE_TWO_FORKS"] = "1"
    ours, theirs = socket.socketpair()
    child = subprocess.Popen(REFERENCE, stdin=theirs.fileno(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env)
    theirs.close()
    with ours:
        ours.settimeout(30)
        heard = b""
        while not heard.endswith(b"\n"):
            heard += ours.recv(64)
        assert heard == (b"ready fork\n" if two_forks else b"ready fork clone\n")
        ours.sendmsg([line], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(
            __import__("array").array("i", fds))))] if fds else [])
        answer = b""
        if line.startswith(b'{"fork"'):
            while not answer.endswith(b"\n"):
                answer += ours.recv(256)
        ours.shutdown(socket.SHUT_WR)
        out, err = child.communicate(timeout=30)
    return child.returncode, answer, err


@pytest.mark.parametrize("request_line, why", [
    (b'{"fork": {"env": {"CADRE_NODE_ID": "n1"}}}\n', b"exactly one descriptor"),
    (b'{"fork": {"env": {"PATH": "/x"}}}\n', b"CADRE_"),
    (b'{"fork": {"env": {}, "join": ["/etc/passwd"]}}\n', b"cgroup.procs"),
])
def test_a_fork_server_refuses_a_bad_request_and_serves_on(request_line, why):
    read_end, write_end = os.pipe()
    try:
        fds = None if b"CADRE_NODE_ID" in request_line else [write_end]
        code, answer, err = _serve(request_line, fds)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert answer.startswith(b"refused ") and why in answer, answer
    assert code == 0 and b"Traceback" not in err, err


@pytest.mark.parametrize("two_forks", [False, True], ids=["clone", "two forks"])
def test_a_forked_node_is_this_process_child_runs_as_the_node_and_writes_to_the_descriptor(tmp_path, two_forks):
    """Both ways a fork server makes a node: one clone whose parent is the standby's parent, or
    two forks with that parent a subreaper. The node's output goes where the request said."""
    THIS_OS.become_subreaper()
    read_end, write_end = os.pipe()
    missing = tmp_path / "missing" / "n1"
    request = json.dumps({"fork": {"env": {"CADRE_NODE_ID": "n1", "CADRE_NODE_DIR": str(missing)}}}).encode() + b"\n"
    try:
        code, answer, err = _serve(request, [write_end], two_forks=two_forks)
        os.close(write_end)
        write_end = -1
        word, _sp, pid = answer.strip().partition(b" ")
        assert word == b"forked" and pid.isdigit(), answer
        _pid, status = os.waitpid(int(pid), 0)  # ECHILD here: the node is not this process's child
        output = b""
        while chunk := os.read(read_end, 4096):
            output += chunk
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    assert code == 0 and b"Traceback" not in err, err
    assert os.waitstatus_to_exitcode(status) == 2, output  # it ran as node n1: its folder is missing
    assert b"cadre-node: error" in output and b"Traceback" not in output, output


def _liar(tmp_path, pid_file) -> list[str]:
    """A node program whose fork server answers every request with the pid in `pid_file`: a
    process it never made (issue 39, item 1)."""
    return program(tmp_path, "liar", (
        "    import socket\n"
        "    channel = socket.socket(fileno=0)\n"
        "    channel.sendall(b'ready fork clone\\n')\n"
        "    while True:\n"
        "        data = channel.recv(65536)\n"
        "        if not data:\n"
        "            sys.exit(0)\n"
        "        if b'\\n' in data:\n"
        f"            channel.sendall(b'forked ' + open({str(pid_file)!r}, 'rb').read().strip() + b'\\n')\n"))


def _held(pid: int) -> tuple[int, str]:
    """What a host could do to a process, as the OS holds it: its nice value and its cgroups."""
    with open(f"/proc/{pid}/cgroup", encoding="ascii") as fh:
        return psutil.Process(pid).nice(), fh.read()


async def test_a_fork_server_naming_a_pid_it_did_not_make_is_refused_and_that_process_left_alone(
        tmp_path, crowd, no_parks, monkeypatch, caplog):
    """Regression (issue 39, item 1): a node program answered `forked <pid>` with an unrelated
    process's pid, and the host adopted it: reniced it, moved it into a node's group, killed it
    at Remove. Here it is a process of this test's (this host's child, its own session, made
    before the request): refused in words, the start goes on cold, the process untouched."""
    monkeypatch.setattr(standby_module, "FIRST_PAUSE_S", 0.05)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    pid_file = tmp_path / "victim.pid"
    pid_file.write_text(str(victim.pid))
    before = _held(victim.pid)
    orch = make(tmp_path, _liar(tmp_path, pid_file))
    # Caps a forked node gets (a CPU cap forks; a memory cap starts cold): adopted, the process
    # would be reniced and moved into the node's cpu group, where this computer has one.
    way = caps.choose(THIS_OS, "htest" + secrets.token_hex(6), scope_address=lambda: None)
    orch.caps = caps.CapsKeeper(way, lambda _node_id: NodeCaps(cpu_percent=50, low_priority=True), system=THIS_OS)
    await orch.init()
    try:
        server = await ready_standby(orch)
        assert orch.standby is not None and orch.standby.ready is not None and orch.standby.ready.forks
        handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
        assert handle.pid != victim.pid, "the host adopted a process the fork server did not make"
        assert [h.pid for h in orch.list_nodes()] == [handle.pid]
        refused = [r.getMessage() for r in caplog.records if f"pid {victim.pid}" in r.getMessage()]
        assert refused and "refused" in refused[0] and "before" in refused[0], refused
        await async_wait_until(lambda: gone(server), timeout=10, what="the lying fork server ended")
        await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the cold start answering")
        await orch.remove_node("n1")
        assert victim.poll() is None, "the unrelated process was killed"
        assert _held(victim.pid) == before, "the unrelated process was reniced or moved"
        await orch.stop_all()
        assert victim.poll() is None, "the unrelated process was killed at the host's stop"
    finally:
        orch.close()
        victim.kill()
        victim.wait()


async def test_a_fork_server_naming_one_of_the_hosts_own_nodes_is_refused(tmp_path, crowd, no_parks, monkeypatch,
                                                                          caplog):
    """That node is this host's child, in its own session, perhaps made after the request (a
    start beside it): named as a new node, two nodes would hold one process, and the Remove of
    one would kill the other's (issue 39, item 1)."""
    monkeypatch.setattr(standby_module, "FIRST_PAUSE_S", 0.05)
    pid_file = tmp_path / "victim.pid"
    pid_file.write_text("1")
    orch = make(tmp_path, _liar(tmp_path, pid_file))
    await orch.init()
    try:
        server = await ready_standby(orch)
        first = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})  # refused: cold
        pid_file.write_text(str(first.pid))
        await ready_standby(orch, other_than=server)
        second = await orch.start("n2", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
        assert second.pid != first.pid, "two nodes hold one process"
        refused = [r.getMessage() for r in caplog.records if f"named pid {first.pid}" in r.getMessage()]
        assert refused and "already one of this host's nodes" in refused[0], refused
        await orch.remove_node("n2")
        assert not gone(first.pid), "the Remove of one node ended another's process"
        await orch.stop_all()
    finally:
        orch.close()
