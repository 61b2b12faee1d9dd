"""GET /status?wait=S&since=STATE: a long-poll answered when the state changes (issue 26, a quiet probe)."""

from __future__ import annotations

import asyncio
import signal
import time

from cadre_desktop.node.node import MAX_WAITERS
from tests.support.node_process import NodeLauncher, NodeProcess, poll


async def _waiting(node: NodeProcess, target: str) -> asyncio.Task:
    """A long-poll in flight: the node answered a plain /status since it was sent, and this one not."""
    task = asyncio.create_task(node.get(target, timeout=40))
    for _ in range(3):  # each plain answer means the node has read and parked what came before it
        assert (await node.get("/status")).status == 200
    assert not task.done(), "the node answered a long-poll at once although its state had not changed"
    return task


async def test_a_long_poll_is_answered_as_soon_as_the_node_is_claimed(nodes: NodeLauncher) -> None:
    node = await nodes.start("wait-1")
    started = time.monotonic()
    task = await _waiting(node, "/status?wait=30&since=unclaimed")
    assert (await node.claim("family")).status == 200
    reply = await poll(lambda: task.done() and task.result(), deadline_s=5, what="the long-poll's answer")
    assert reply.status == 200 and reply.body["state"] == "joined" and reply.body["cadre"] == "family"
    assert time.monotonic() - started < 10


async def test_a_long_poll_ends_after_its_wait_with_the_same_state(nodes: NodeLauncher) -> None:
    node = await nodes.start("wait-2")
    started = time.monotonic()
    reply = await node.get("/status?wait=0.4&since=unclaimed")
    assert time.monotonic() - started >= 0.4
    assert reply.status == 200 and reply.body["state"] == "unclaimed"


async def test_a_state_other_than_since_or_a_bad_wait_is_answered_at_once(nodes: NodeLauncher) -> None:
    node = await nodes.start("wait-3")
    for target in ("/status?wait=30&since=joined", "/status?wait=nan&since=unclaimed",
                   "/status?wait=-5&since=unclaimed", "/status?wait=inf&since=unclaimed",
                   "/status?wait=abc&since=unclaimed", "/status?wait=30", "/status?since=unclaimed"):
        reply = await node.get(target, timeout=3)  # each would hold 30 s if it waited
        assert reply.status == 200 and reply.body["state"] == "unclaimed", target


async def test_only_a_few_requests_wait_at_once_the_next_is_answered_at_once(nodes: NodeLauncher) -> None:
    """A waiting request keeps its connection busy: anyone on the LAN may ask, so few wait."""
    node = await nodes.start("wait-4")
    waiting = [asyncio.create_task(node.get("/status?wait=30&since=unclaimed", timeout=40))
               for _ in range(MAX_WAITERS)]
    for _ in range(3):
        assert (await node.get("/status")).status == 200
    assert not any(task.done() for task in waiting)
    reply = await node.get("/status?wait=30&since=unclaimed", timeout=3)
    assert reply.body["state"] == "unclaimed"
    assert (await node.claim("family")).status == 200
    replies = await asyncio.gather(*waiting)
    assert {r.body["state"] for r in replies} == {"joined"}


async def test_a_node_stops_at_once_with_a_long_poll_waiting_and_answers_it(nodes: NodeLauncher) -> None:
    node = await nodes.start("wait-5")
    task = await _waiting(node, "/status?wait=30&since=unclaimed")
    started = time.monotonic()
    node.send(signal.SIGTERM)
    assert await node.wait_exit(deadline_s=1.0) == 0
    assert time.monotonic() - started < 1.0
    reply = await task
    assert reply.status == 200 and reply.body["state"] == "unclaimed"


async def test_a_long_poll_leaves_no_access_line(nodes: NodeLauncher) -> None:
    node = await nodes.start("wait-6")
    await node.get("/status?wait=0.1&since=unclaimed")
    await node.get("/nowhere")  # a line the access log keeps, after the long-poll's
    await poll(lambda: "/nowhere" in node.logs(), deadline_s=5, what="the access line of /nowhere")
    assert "/status" not in node.logs()
