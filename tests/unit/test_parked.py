"""The child each fork server parks ahead (`host/local/parked.py`), with the OS and the fork
server's answers faked: asked for once a node ended unasked and the server is ready, none
otherwise, taken by a start, given back after a long calm, replaced when
taken or dead, never asked of a program that refuses, ended with its server."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable

import pytest

from cadre_desktop.host.local import forks, parked
from cadre_desktop.host.local.parked import Parking
from tests.support.fake_os import FakeOS
from tests.support.polling import async_wait_until


class FakePopen:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.args = ["node"]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class FakeServer:
    """What `Parking` uses of a fork server: its process, its channel, its lock."""

    def __init__(self, pid: int) -> None:
        self.popen = FakePopen(pid)
        self.channel: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lock = threading.Lock()


class WatchingOS(FakeOS):
    """A fake OS that keeps each exit watch, so a test can end a watched process."""

    def __init__(self) -> None:
        super().__init__()
        self.watches: dict[int, Callable[[int | None], None]] = {}

    def watch_exit(self, loop, pid, popen, on_exit):
        self._note("watch_exit", pid)
        self.watches[pid] = on_exit
        return lambda: self.watches.pop(pid, None)


@pytest.fixture
def answers(monkeypatch):
    """The fork server's answers to park requests, in order: a pid (parked), "refused", or None (no answer)."""
    queue: list[int | str | None] = []
    asked: list[int] = []

    def park(server, system):
        asked.append(server.popen.pid)
        answer = queue.pop(0) if queue else None
        if answer == "refused":
            return None, True
        if answer is None:
            return None, False
        ours, theirs = socket.socketpair()
        theirs.close()
        return (FakePopen(int(answer)), ours), False

    monkeypatch.setattr(forks, "park", park)
    monkeypatch.setattr(parked, "AGAIN_S", 0.0)
    monkeypatch.setattr(parked, "FIRST_PAUSE_S", 0.0)
    return queue, asked


@pytest.fixture
def server():
    made = FakeServer(100)
    yield made
    if made.channel is not None:
        made.channel.close()


async def test_a_ready_fork_server_gets_a_child_parked_which_a_start_takes_and_another_is_parked(answers, server):
    queue, asked = answers
    queue.extend([201, 202])
    system = WatchingOS()
    parking = Parking(system)
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    await async_wait_until(lambda: parking.parked(server) is not None, what="a parked child")
    child = parking.take(server)
    assert child is not None and child.popen.pid == 201
    assert 201 not in system.watches, "the taken child is still watched as a parked one (the node's watch follows it)"
    await async_wait_until(lambda: parking.parked(server) is not None, what="the next parked child")
    assert parking.parked(server).popen.pid == 202 and asked == [100, 100]  # type: ignore[union-attr]
    child.close()
    parking.close()


async def test_no_parked_child_means_the_start_forks(answers, server):
    parking = Parking(WatchingOS())
    assert parking.take(server) is None


async def test_a_parked_child_that_dies_is_replaced_and_counts_for_no_node(answers, server):
    queue, asked = answers
    queue.extend([301, 302])
    system = WatchingOS()
    parking = Parking(system)
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    await async_wait_until(lambda: parking.parked(server) is not None, what="a parked child")
    system.watches[301](-9)  # it was killed while parked
    await async_wait_until(lambda: (parking.parked(server) or None) is not None
                           and parking.parked(server).popen.pid == 302,  # type: ignore[union-attr]
                           what="a parked child in place of the dead one")
    assert parking.enabled and asked == [100, 100]
    parking.close()


async def test_parked_children_that_keep_dying_stop_parking(answers, server):
    queue, _asked = answers
    queue.extend([401, 402, 403, 404])
    system = WatchingOS()
    parking = Parking(system)
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    for pid in (401, 402, 403):
        await async_wait_until(lambda p=pid: (parking.parked(server) or None) is not None  # type: ignore[misc]
                               and parking.parked(server).popen.pid == p,  # type: ignore[union-attr]
                               what=f"parked child {pid}")
        system.watches[pid](-9)
    assert not parking.enabled and parking.parked(server) is None, "parking went on after three deaths in a row"
    parking.close()


async def test_a_program_that_refuses_to_park_is_not_asked_again(answers, server):
    queue, asked = answers
    queue.append("refused")
    parking = Parking(WatchingOS())
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    await async_wait_until(lambda: not parking.enabled, what="parking turned off")
    parking.park_soon(server)
    assert asked == [100] and parking.take(server) is None
    parking.close()


async def test_a_fork_server_that_leaves_takes_its_parked_child_with_it(answers, server):
    queue, _asked = answers
    queue.append(501)
    system = WatchingOS()
    parking = Parking(system)
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    await async_wait_until(lambda: parking.parked(server) is not None, what="a parked child")
    parking.forget(server)
    assert parking.parked(server) is None and ("kill_and_reap", 501, "parked child") in system.calls
    parking.close()


async def test_close_ends_the_parked_child_and_one_parked_after_close_is_ended_too(answers, server):
    queue, _asked = answers
    queue.append(601)
    system = WatchingOS()
    parking = Parking(system)
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    await async_wait_until(lambda: parking.parked(server) is not None, what="a parked child")
    parking.close()
    assert ("kill_and_reap", 601, "parked child") in system.calls
    parking.park_soon(server)
    assert parking.parked(server) is None, "a closed pool parked a child"


async def test_a_dead_parked_child_is_never_handed_to_a_start(answers, server):
    queue, _asked = answers
    queue.extend([701, 702])
    system = WatchingOS()
    parking = Parking(system)
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    await async_wait_until(lambda: parking.parked(server) is not None, what="a parked child")
    parking.parked(server).popen.returncode = -9  # type: ignore[union-attr]  # dead, its exit not seen yet
    assert parking.take(server) is None
    assert ("kill_and_reap", 701, "parked child") in system.calls
    parking.close()


async def test_no_child_is_parked_during_a_crowd_of_starts_and_one_is_once_it_is_over(answers, server):
    """A crowd's nodes all fork and share the fork server's pages; a parked child's node keeps its own."""
    queue, asked = answers
    queue.append(801)
    crowd = {"on": True}
    parking = Parking(WatchingOS(), calm=lambda: not crowd["on"])
    parking.want(server)  # a node's child ended unasked: a heal is wanted
    await async_wait_until(lambda: parking._timers, what="the ask put off")
    for _ in range(3):  # a few looks at the crowd: still on, nothing asked
        await asyncio.sleep(0)
    assert asked == [] and parking.parked(server) is None
    crowd["on"] = False
    await async_wait_until(lambda: parking.parked(server) is not None, what="a child parked once the crowd is over")
    assert asked == [100]
    parking.close()


async def test_no_child_is_parked_until_a_node_ends_unasked_and_none_is_kept_after_a_long_calm(answers, server,
                                                                                               monkeypatch):
    """An idle host runs N + 3 processes: a parked child only while heals are wanted."""
    queue, asked = answers
    queue.extend([901, 902])
    system = WatchingOS()
    parking = Parking(system)
    parking.park_soon(server)  # the server ready, no node ended unasked: nothing asked
    for _ in range(3):
        await asyncio.sleep(0)
    assert asked == [] and parking.parked(server) is None
    monkeypatch.setattr(parked, "KEEP_S", 0.2)
    parking.want(server)
    await async_wait_until(lambda: parking.parked(server) is not None, what="a child parked after an unasked exit")
    await async_wait_until(lambda: parking.parked(server) is None, what="the parked child ended after the calm")
    assert ("kill_and_reap", 901, "parked child") in system.calls
    parking.park_soon(server)  # a start's ask after the calm: none parked again until the next exit
    for _ in range(3):
        await asyncio.sleep(0)
    assert asked == [100] and parking.parked(server) is None
    parking.close()
