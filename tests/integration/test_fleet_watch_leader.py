"""Two things failover's speed rests on, on a real 3-member etcd cluster on 127.0.0.1, TLS on: a
watch that sees a computer's lease key go the moment its lease expires or is revoked (it wakes the
takers' pass), and etcd's leadership handed to a computer holding fewer failover nodes
(host/fleetrun/leadership.py). Every wait polls a condition against a deadline."""

from __future__ import annotations

import asyncio
import os

import pytest

from cadre_desktop.host.fleetrun.leadership import LeaderPlacement
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.leases import LeaseKeeper
from cadre_desktop.host.fleetstate.shared import COMPUTERS, SharedState, lease_key
from tests.support.etcd_cluster import Cluster
from tests.support.node_process import poll

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the member's TLS key needs memfd")


async def test_a_watch_sees_a_lease_key_go_at_expiry_and_at_revoke_and_ends_in_words_when_its_channel_closes(
        etcd_cluster: Cluster) -> None:
    client = etcd_cluster.client(None)
    shared = SharedState(client)
    expiring, revoked = LeaseKeeper(client, ttl_ms=2000), LeaseKeeper(client, ttl_ms=15000)
    await shared.announce("computer-c", await expiring.start(), 2000)
    await shared.announce("computer-b", await revoked.start(), 15000)
    seen: list[bytes] = []
    calls: list[list[bytes]] = []

    def deleted(keys: list[bytes]) -> None:
        calls.append(keys)
        seen.extend(keys)
    watch = asyncio.create_task(client.watch_deletions(COMPUTERS, deleted))
    try:
        await poll(lambda: calls == [[]], deadline_s=10.0, what="the watch made (told with no keys)")
        await revoked.stop()  # revoked: its key goes at once
        await poll(lambda: lease_key("computer-b") in seen, deadline_s=10.0, what="the revoked lease's key seen going")
        await expiring.stop(revoke=False)  # no more renewals: it expires within its 2 s
        await poll(lambda: lease_key("computer-c") in seen, deadline_s=15.0, what="the expired lease's key seen going")
        assert seen == [lease_key("computer-b"), lease_key("computer-c")]
        assert not watch.done()
        await client.close()  # the channel closes under the stream: a failure in words, not this task's cancel
        await poll(lambda: watch.done(), deadline_s=10.0, what="the watch ending with its channel")
        assert isinstance(watch.exception(), StoreUnavailable)
        assert "watch" in str(watch.exception())
    finally:
        watch.cancel()


async def test_the_leadership_goes_to_the_computer_holding_fewer_failover_nodes_and_never_back(
        etcd_cluster: Cluster) -> None:
    client = etcd_cluster.client(None)
    names = [m.spec.name for m in etcd_cluster.members]

    async def leader() -> str:
        _, lead = await client.status()
        return next(m.name for m in await client.members() if m.id == lead)

    async def everyone() -> set[str]:
        return set(names)

    def placement(me: str) -> LeaderPlacement:
        index = names.index(me)
        return LeaderPlacement(me=lambda: me, client=lambda: client, own=lambda: etcd_cluster.client(index),
                               alive=everyone, every_s=0.0)  # (no settling wait: the holdings are the test's)

    async def led() -> bool:
        try:
            return bool(await leader())
        except (StoreUnavailable, StopIteration):
            return False
    await poll(led, deadline_s=10.0, what="a leader")
    first = await leader()
    emptiest = min(n for n in names if n != first)
    held = {n: 1 for n in names if n != emptiest}
    followers = [placement(n) for n in names if n != first]
    for follower in followers:
        await follower.check(held)
    assert [f.moves for f in followers] == [0, 0] and await leader() == first  # only the leader hands it on
    moving = placement(first)
    await moving.check(held)
    assert (moving.moves, moving.moved_to) == (1, emptiest)

    async def moved() -> bool:
        try:
            return await leader() == emptiest
        except (StoreUnavailable, StopIteration):
            return False
    await poll(moved, deadline_s=15.0, what="the leadership on the computer holding none")
    # Now every computer holds as many as the leader or more: it stays where it is.
    staying = placement(emptiest)
    await staying.check({n: 1 for n in names})
    assert staying.moves == 0 and await leader() == emptiest
