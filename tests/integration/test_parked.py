"""The child a fork server parks ahead (`host/local/parked.py`), with the real reference node:
none is parked until a node ends unasked (an idle host keeps no parked child), then a start
takes it (lone or not), it is the killed node when it replaces one, it never serves before it
is taken, one that dies is replaced, and the pool is the fork server and one parked child, no
more."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import sys
import time

import psutil
import pytest

from cadre_desktop.host.local import standby as standby_module
from tests.support.host_calls import post_json
from tests.support.polling import async_wait_until
from tests.support.warm import close_and_end, gone, make, ready_standby, status

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork servers need Linux pidfds")


@pytest.fixture
def orch(tmp_path, monkeypatch):
    """A calm host (no crowd of starts): without a parked child a lone start would take the fork server itself."""
    monkeypatch.setattr(standby_module, "START_UP_S", 0.0)
    made = make(tmp_path)
    yield made
    close_and_end(made)


async def parked_pid(orch, other_than: int | None = None) -> int:
    """The pid of the child the ready fork server parked (another than `other_than`), once a heal
    is wanted: the pool told of a node's child ending unasked, as the orchestrator tells it."""
    await ready_standby(orch)
    orch.standby.note_exit()

    def parked() -> int:
        server = orch.standby.ready
        child = orch.standby.parking.parked(server) if server is not None else None
        return child.popen.pid if child is not None and child.popen.pid != other_than else 0
    return await async_wait_until(parked, timeout=15, what="a parked child")


def standby_processes() -> list[psutil.Process]:
    """This process's children that are the node program in standby (no node's identity yet)."""
    found = []
    for proc in psutil.Process().children():
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("CADRE_STANDBY") == "1" and "CADRE_NODE_ID" not in env:
            found.append(proc)
    return found


async def test_a_lone_start_takes_the_parked_child_and_the_fork_server_stays(orch):
    await orch.init()
    server = await ready_standby(orch)
    child = await parked_pid(orch)
    assert child != server
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    assert handle.pid == child, "the start did not take the parked child"
    assert orch.standby.ready is not None and orch.standby.ready.popen.pid == server, "the fork server was used up"
    await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the taken node answering")
    assert (status(handle.api_port) or {}).get("node_id") == "n1"
    proc = psutil.Process(handle.pid)
    assert proc.ppid() == os.getpid(), "a parked node is not the host's child"
    assert os.getsid(handle.pid) == handle.pid == handle.pgid, "a parked node has no session of its own"
    assert proc.cwd() == str(orch.paths.node_dir("n1"))
    log_path = orch.paths.node_log("n1")
    await async_wait_until(lambda: log_path.exists() and "listening on" in log_path.read_text(), timeout=15,
                           what="the taken node's output in its own log")
    again = await parked_pid(orch, other_than=child)
    assert again not in (child, server), "no child parked again after the take"
    await orch.stop_all()


async def test_a_parked_child_never_serves_before_it_is_taken(orch):
    await orch.init()
    child = await parked_pid(orch)
    proc = psutil.Process(child)
    assert proc.ppid() == os.getpid() and os.getsid(child) == child
    assert [c for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN] == [], \
        "a parked child listens on a port"
    env = proc.environ()
    assert not [k for k in env if k.startswith("CADRE_") and k != "CADRE_STANDBY"], "a parked child holds a node's variables"
    assert not orch.nodes_dir.exists() or list(orch.nodes_dir.iterdir()) == [], "a parked child touched a work folder"


async def test_a_respawn_from_a_parked_child_is_the_killed_node_with_its_identity_ports_and_claim(orch):
    await orch.init()
    await parked_pid(orch)
    secret = secrets.token_urlsafe(32)
    first = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secret})
    await async_wait_until(lambda: status(first.api_port), timeout=15, what="the node answering")
    code, _body = await asyncio.to_thread(post_json, f"http://127.0.0.1:{first.api_port}/claim",
                                          {"secret": secret, "cadre": "family"})
    assert code == 200
    before = status(first.api_port) or {}
    next_child = await parked_pid(orch, other_than=first.pid)
    os.kill(first.pid, signal.SIGKILL)
    await async_wait_until(lambda: not first.alive, timeout=10, what="the node's exit seen")
    second = await orch.start("n1", 2, {"CADRE_CLAIM_SECRET": secret}, want_ports=(first.api_port, first.p2p_port))
    assert second.pid == next_child, "the respawn did not take the parked child"
    assert (second.api_port, second.p2p_port) == (first.api_port, first.p2p_port)
    await async_wait_until(lambda: status(second.api_port), timeout=15, what="the respawned node answering")
    after = status(second.api_port) or {}
    assert (after.get("node_id"), after.get("peer_id"), after.get("cadre"), after.get("state")) == \
        ("n1", before.get("peer_id"), "family", "joined"), "the respawned node is not the node that was killed"
    code, body = await asyncio.to_thread(post_json, f"http://127.0.0.1:{second.api_port}/claim",
                                         {"secret": secret, "cadre": "rivals"})
    assert code == 409 and body["error"]["code"] == "already-claimed"
    assert gone(first.pid)
    await orch.stop_all()


async def test_a_parked_child_that_dies_is_replaced_and_reaped(orch, monkeypatch):
    from cadre_desktop.host.local import parked

    monkeypatch.setattr(parked, "FIRST_PAUSE_S", 0.05)
    await orch.init()
    server = await ready_standby(orch)
    child = await parked_pid(orch)
    os.kill(child, signal.SIGKILL)
    again = await parked_pid(orch, other_than=child)
    assert again != server and orch.standby.ready.popen.pid == server, "the fork server went with its parked child"
    await async_wait_until(lambda: not psutil.pid_exists(child), timeout=10, what="the dead parked child reaped")
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    assert handle.pid == again
    await orch.stop_all()


async def test_the_pool_is_one_fork_server_and_one_parked_child_and_close_ends_both(orch):
    """The process count bench/README.md and docs/node-contract.md state: one parked child per fork server."""
    await orch.init()
    server = await ready_standby(orch)
    child = await parked_pid(orch)
    assert sorted(p.pid for p in standby_processes()) == sorted([server, child])
    orch.close()
    await async_wait_until(lambda: gone(server) and gone(child), timeout=10, what="the fork server and its parked child ended")


async def test_an_idle_pool_parks_nothing_until_a_node_is_killed(orch):
    """N + 3 processes at idle: a running node and its fork server, no parked child, until the
    node ends unasked (a kill): then one is parked for its respawn."""
    await orch.init()
    server = await ready_standby(orch)
    handle = await orch.start("n1", 1, {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(32)})
    await async_wait_until(lambda: status(handle.api_port), timeout=15, what="the node answering")
    for _ in range(20):  # a few loop turns and a moment: nothing asks for a park
        await asyncio.sleep(0.01)
    assert orch.standby.parking.parked(orch.standby.ready) is None
    # (a forked node shows its fork server's environment: told apart by its pid)
    assert sorted(p.pid for p in standby_processes() if p.pid != handle.pid) == [server], "an idle pool parked a child"
    os.kill(handle.pid, signal.SIGKILL)
    await async_wait_until(lambda: orch.standby.parking.parked(orch.standby.ready) is not None, timeout=15,
                           what="a child parked after the kill")
    await orch.stop_all()


def _parked_by_hand(two_forks: bool = False):
    """The reference node in standby on a socket, asked to park one child: (standby, its socket,
    the parked child's pid, the host's end of the parked child's socket)."""
    import array
    import subprocess

    from tests.support.processes import THIS_OS
    from tests.support.warm import REFERENCE

    THIS_OS.become_subreaper()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    env["CADRE_STANDBY"] = "1"
    if two_forks:
        env["CADRE_NODE_TWO_FORKS"] = "1"
    ours, theirs = socket.socketpair()
    standby = subprocess.Popen(REFERENCE, stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=env)
    theirs.close()
    ours.settimeout(30)
    heard = b""
    while not heard.endswith(b"\n"):
        heard += ours.recv(64)
    ours.sendall(b'{"park": {}}\n')
    data, ancdata, _flags, _addr = ours.recvmsg(64, socket.CMSG_SPACE(4))
    assert data.startswith(b"parked ") and ancdata, data
    fds = array.array("i")
    fds.frombytes(ancdata[0][2])
    return standby, ours, int(data.split()[1]), socket.socket(fileno=fds[0])


def _exit_code(pid: int) -> int:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"the parked child {pid} did not end")


@pytest.mark.parametrize("two_forks", [False, True], ids=["clone", "two forks"])
def test_a_parked_child_whose_host_lets_go_leaves_quietly_and_the_standby_serves_on(two_forks):
    standby, channel, pid, parked = _parked_by_hand(two_forks)
    try:
        assert psutil.Process(pid).ppid() == os.getpid(), "the parked child is not this process's child"
        parked.close()  # the host went, or let it go: end of file
        assert _exit_code(pid) == 0
        channel.sendall(b'{"park": {}}\n')  # the standby still serves
        assert channel.recv(64).startswith(b"parked ")
    finally:
        channel.close()
        standby.wait(timeout=15)
    assert b"Traceback" not in (standby.stderr.read() if standby.stderr else b"")


def test_a_parked_child_refuses_anything_but_a_take_and_ends():
    standby, channel, pid, parked = _parked_by_hand()
    try:
        parked.sendall(b'{"fork": {"env": {"CADRE_NODE_ID": "n1"}}}\n')
        answer = parked.recv(256)
        assert answer.startswith(b"refused "), answer
        assert _exit_code(pid) == 2
    finally:
        parked.close()
        channel.close()
        standby.wait(timeout=15)
