"""host/local/spawner.py: a start's blocking part on a thread, and what is let go is ended."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from cadre_desktop.errors import SpawnError
from cadre_desktop.host.local.spawner import Spawner
from tests.support.polling import async_wait_until


def spawner_and_discarded() -> tuple[Spawner[str], list[str]]:
    discarded: list[str] = []
    return Spawner(discarded.append), discarded


def held_work() -> tuple[threading.Event, threading.Event, Callable[[], str]]:
    """A start's blocking part that says it began (`entered`) and ends, with its child, once `go_on` is set."""
    entered, go_on = threading.Event(), threading.Event()

    def work() -> str:
        entered.set()
        go_on.wait(10)
        return "child-1"
    return entered, go_on, work


async def test_a_start_cancelled_while_its_child_comes_up_ends_that_child_when_it_comes():
    spawner, discarded = spawner_and_discarded()
    entered, go_on, work = held_work()
    start = asyncio.create_task(spawner.run("n1", work))
    await async_wait_until(entered.is_set, what="the work under way")
    assert spawner.busy("n1")
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    assert not spawner.busy("n1")
    go_on.set()
    await async_wait_until(lambda: discarded == ["child-1"], what="the late child ended")
    spawner.close()


async def test_a_closed_spawner_ends_the_child_in_flight_and_starts_nothing_more():
    spawner, discarded = spawner_and_discarded()
    entered, go_on, work = held_work()
    start = asyncio.create_task(spawner.run("n1", work))
    await async_wait_until(entered.is_set, what="the work under way")
    spawner.close()
    go_on.set()
    with pytest.raises(SpawnError):
        await start
    assert discarded == ["child-1"]
    with pytest.raises(SpawnError):
        await spawner.run("n2", lambda: "child-2")
    assert discarded == ["child-1"]


async def test_idle_waits_for_the_nodes_start_in_flight_only():
    spawner, discarded = spawner_and_discarded()
    go_on = threading.Event()
    start = asyncio.create_task(spawner.run("n1", lambda: "child-1" if go_on.wait(10) else "late"))
    await async_wait_until(lambda: spawner.busy("n1"), what="the start in flight")
    await spawner.idle("n2")  # another node's start holds nobody
    waiter = asyncio.create_task(spawner.idle("n1"))
    go_on.set()
    await waiter
    assert start.done() and start.result() == "child-1" and discarded == []
    hold = threading.Event()
    second = asyncio.create_task(spawner.run("n1", lambda: "child-2" if hold.wait(10) else "late"))
    await async_wait_until(lambda: spawner.busy("n1"), what="the second start in flight")
    with pytest.raises(RuntimeError):  # a caller that did not wait for idle: a bug, said at once
        await spawner.run("n1", lambda: "child-3")
    hold.set()
    assert await second == "child-2" and discarded == []
    spawner.close()


async def test_a_start_on_the_loop_is_in_flight_like_a_threads_and_a_second_is_refused():
    spawner, discarded = spawner_and_discarded()
    go_on = asyncio.Event()

    async def take() -> str:
        await go_on.wait()
        return "child-1"
    start = asyncio.create_task(spawner.run_here("n1", take))
    await async_wait_until(lambda: spawner.busy("n1"), what="the take in flight")
    with pytest.raises(RuntimeError):
        await spawner.run_here("n1", take)
    idle = asyncio.create_task(spawner.idle("n1"))
    await asyncio.sleep(0)
    assert not idle.done(), "idle returned while the node's take was in flight"
    go_on.set()
    assert await start == "child-1" and discarded == []
    await idle
    assert not spawner.busy("n1")


async def test_a_spawner_closed_during_a_start_on_the_loop_ends_the_child_it_brings():
    spawner, discarded = spawner_and_discarded()
    go_on = asyncio.Event()

    async def take() -> str:
        await go_on.wait()
        return "child-1"
    start = asyncio.create_task(spawner.run_here("n1", take))
    await async_wait_until(lambda: spawner.busy("n1"), what="the take in flight")
    spawner.close()
    go_on.set()
    with pytest.raises(SpawnError):
        await start
    assert discarded == ["child-1"]
    with pytest.raises(SpawnError):
        await spawner.run_here("n2", take)
