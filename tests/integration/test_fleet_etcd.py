"""The fleet's shared state on a real 3-member etcd cluster on 127.0.0.1, TLS on
(host/fleetstate/): racing takers, a member killed, a lease that expires, a damaged data folder,
a member that joins and leaves. Every wait polls a condition against a deadline."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from cadre_desktop.host.fleetstate.client import FleetClient
from cadre_desktop.host.fleetstate.errors import EtcdDataCorrupt, StoreUnavailable
from cadre_desktop.host.fleetstate.leases import LeaseKeeper, extend_node, node_terms
from cadre_desktop.host.fleetstate.member import EtcdMember, Peer, join_cluster, promote_member
from cadre_desktop.host.fleetstate.shared import SharedState
from cadre_desktop.host.fleetstate.takeover import Action, FleetView, TakeoverRules, decide_takeover
from cadre_desktop.node.errors import ExitCode
from cadre_desktop.wire.lease import boot_ns, env_of
from tests.support.etcd_cluster import Cluster, make_cluster, start_cluster
from tests.support.node_process import NodeLauncher, poll

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the member's TLS key needs memfd")


async def answers(client: FleetClient) -> bool:
    try:
        await client.get(b"/cadre/fleet/v1/probe")
        return True
    except StoreUnavailable:
        return False


async def _racing_takers(etcd_cluster: Cluster) -> None:
    """Two racing takers: one wins, the other changes nothing; a stale generation changes nothing."""
    b, c = SharedState(etcd_cluster.client(1)), SharedState(etcd_cluster.client(2))
    first = SharedState(etcd_cluster.client(0))
    assert (await first.take("study", "computer-a", 0, holder=None, mark_at=time.time())).won
    await first.set_failover("study", True)
    results = await asyncio.gather(*(s.take("study", who, 1, holder="computer-a", mark_at=time.time(), failures=1)
                                     for s, who in ((b, "computer-b"), (c, "computer-c"))))
    assert sorted(r.won for r in results) == [False, True]
    winner = "computer-b" if results[0].won else "computer-c"
    loser = results[1] if results[0].won else results[0]
    assert loser.found is not None and loser.found.holder == winner and loser.found.generation == 2
    now = await first.read_node("study")
    assert (now.holder, now.generation, now.failover) == (winner, 2, True)
    assert now.mark is not None and (now.mark.generation, now.mark.by, now.mark.failures) == (2, winner, 1)
    stale = await first.take("study", "computer-a", 1, holder="computer-a", mark_at=time.time())
    assert not stale.won and (await first.read_node("study")).holder == winner


async def test_racing_takers_and_a_revoked_lease_that_drops_its_computer_key_at_once(etcd_cluster: Cluster) -> None:
    await _racing_takers(etcd_cluster)
    shared = SharedState(etcd_cluster.client(2))
    keeper = LeaseKeeper(shared.client, ttl_ms=15000)
    await shared.announce("computer-c", await keeper.start(), 15000)
    assert await shared.lease_alive("computer-c")
    await keeper.stop()
    assert not await shared.lease_alive("computer-c")


async def test_a_member_killed_leaves_a_majority_a_take_still_works_and_its_damaged_data_is_left_alone(
        etcd_cluster: Cluster) -> None:
    client = etcd_cluster.client(None)
    shared = SharedState(client)
    assert (await shared.take("n1", "computer-a", 0, holder=None, mark_at=time.time())).won
    victim = etcd_cluster.members[0]
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    await poll(lambda: not victim.running, deadline_s=10.0, what="the member's death")
    await poll(lambda: answers(client), deadline_s=20.0, what="a read from the majority")
    took = await shared.take("n1", "computer-b", 1, holder="computer-a", mark_at=time.time())
    assert took.won and took.generation == 2
    assert (await shared.read_node("n1")).holder == "computer-b"

    db = victim.spec.data_dir / "member" / "snap" / "db"  # the dead member's database is damaged
    db.write_bytes(b"\0" * 8192)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with pytest.raises(EtcdDataCorrupt, match="damaged"):
        await victim.start([Peer(m.spec.name, m.spec.peer_url(True)) for m in etcd_cluster.members])
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before and not victim.running


async def test_a_frozen_member_costs_its_client_one_call_then_the_next_member_answers(etcd_cluster: Cluster) -> None:
    """gRPC keeps its connection to a frozen member until keep-alive gives up (10 s and more);
    the client's call that times out sends the next ones to the next member instead."""
    frozen = etcd_cluster.members[0]
    client = FleetClient([m.spec.endpoint for m in etcd_cluster.members], etcd_cluster.tls[0], timeout_s=1.0)
    try:
        assert await answers(client)  # connected, to the first member listed
        assert frozen.pid is not None
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            # Well inside the keep-alive's 10 s + 2 s: only a new channel to another member answers so soon.
            await poll(lambda: answers(client), deadline_s=7.0, what="a read through another member")
            assert time.monotonic() - started < 7.0
            assert client.endpoints[0] != frozen.spec.endpoint
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
    finally:
        await client.close()


async def test_a_kept_lease_lives_on_and_one_not_renewed_expires_its_node_stopping_first(
        etcd_cluster: Cluster, tmp_path: Path) -> None:
    """Computer a holds a failover node under its lease, moving the node's deadline on while it
    renews; a freezes (no renewal): its node stops by itself before the lease expires in the
    store, and only then does b's take-over decision see the lease gone and take the node."""
    a, b = SharedState(etcd_cluster.client(0)), SharedState(etcd_cluster.client(1))
    keeper = LeaseKeeper(a.client, ttl_ms=2000)
    await a.announce("computer-a", await keeper.start(), 2000)
    first = keeper.deadline_ns
    assert (await a.take("study", "computer-a", 0, holder=None, mark_at=time.time())).won
    await a.set_failover("study", True)
    def seen(alive: bool) -> FleetView:
        return FleetView(me="computer-b", members=3, quorum=True, room=True, holder_lease_alive=alive)
    async with aiohttp.ClientSession() as http:
        nodes = NodeLauncher(tmp_path, http)
        mover: asyncio.Task[None] | None = None
        try:
            node = await nodes.start("study", extra=env_of(node_terms(1, keeper)))
            mover = asyncio.create_task(_move_deadline_on(node.node_dir, keeper))
            assert (await node.status())["generation"] == 1
            assert await a.mark_served("study", "computer-a", 1)
            await poll(lambda: keeper.renewals >= 4, deadline_s=15.0, what="four renewals (past its 2 s)")
            assert keeper.deadline_ns > first and keeper.valid() and await b.lease_alive("computer-a")
            assert node.running and (await node.status())["generation"] == 1
            shared = await b.read_node("study")
            assert decide_takeover(shared, seen(True), TakeoverRules(), time.time()).action is Action.NOTHING

            mover.cancel()
            frozen = keeper.deadline_ns  # the latest deadline the node can have been given
            await keeper.stop(revoke=False)  # computer a freezes: nothing renews its lease any more
            await poll(lambda: boot_ns() >= frozen, deadline_s=5.0, what="the node's deadline")
            assert await b.lease_alive("computer-a"), "the node's deadline must come before its lease's end"
            with pytest.raises(aiohttp.ClientError):
                await node.get("/status", timeout=2.0)
            assert await node.wait_exit(deadline_s=15.0) == ExitCode.LEASE_EXPIRED

            async def gone() -> bool:
                return not await b.lease_alive("computer-a")
            await poll(gone, deadline_s=15.0, what="the lease to expire")
        finally:
            if mover is not None:
                mover.cancel()
            await nodes.close()
    verdict = decide_takeover(await b.read_node("study"), seen(False), TakeoverRules(), time.time())
    assert verdict.action is Action.TAKE and verdict.holder == "computer-a" and verdict.failures == 0
    took = await b.take("study", "computer-b", verdict.expected, holder=verdict.holder, mark_at=time.time())
    assert took.won and took.generation == 2


async def _move_deadline_on(node_dir: Path, keeper: LeaseKeeper) -> None:
    """The host's part while it renews: the node's deadline moved to the lease's, four times a second."""
    while True:
        await asyncio.to_thread(extend_node, node_dir, node_terms(1, keeper))
        await asyncio.sleep(0.25)


async def test_a_third_member_joins_a_running_cluster_and_leaves_it(tmp_path) -> None:
    cluster = make_cluster(tmp_path, 3)  # three computers that trust each other; two members at first
    first, second, third = cluster.members
    try:
        pair = [Peer(m.spec.name, m.spec.peer_url(True)) for m in (first, second)]
        for member in (first, second):
            await member.start(pair)
        await asyncio.gather(first.wait_ready(), second.wait_ready())
        client = cluster.client(0)
        peers = await join_cluster(client, third.spec, True)
        assert {p.name for p in peers} == {"computer-a", "computer-b", "computer-c"}
        await third.start(peers, joining=True)
        await third.wait_ready()
        # It joined as a learner: no vote, no reads of its own, until the others promote it.
        own = third.client(timeout_s=5.0)
        try:
            assert await own.is_learner()
            assert await promote_member(client, third.spec, True)
            assert not await own.is_learner()
        finally:
            await own.close()
        assert not any(m.learner for m in await client.members())
        # A computer's client reaches another computer's member alone (its certificate chains to the pinned one).
        across = FleetClient([second.spec.endpoint], cluster.tls[0], timeout_s=5.0)
        try:
            assert len(await across.members()) == 3
        finally:
            await across.close()

        async def named() -> list[str]:
            return sorted(m.name for m in await client.members())
        await poll(lambda: _all_three(named), deadline_s=20.0, what="three named members")
        assert (await SharedState(cluster.client(2)).take("n", "computer-c", 0, holder=None, mark_at=time.time())).won
        assert (await SharedState(client).read_node("n")).holder == "computer-c"
        await third.leave(client)
        assert await named() == ["computer-a", "computer-b"]
        assert not third.spec.data_dir.exists() and not third.running
    finally:
        await cluster.close()


async def _all_three(named: Callable[[], Awaitable[list[str]]]) -> bool:
    return await named() == ["computer-a", "computer-b", "computer-c"]


async def test_a_member_left_running_by_a_killed_host_is_ended_by_the_next_start(tmp_path) -> None:
    cluster = make_cluster(tmp_path, 1)
    (left,) = cluster.members
    again = EtcdMember(left.spec, left.system, left.command, left.tls)  # what the restarted host makes
    try:
        await start_cluster(cluster)
        assert left.spec.pid_file.is_file() and str(left.pid) in left.spec.pid_file.read_text()
        # The host is gone without its stop: the member runs on. The next start ends it first.
        await again.start([Peer(left.spec.name, left.spec.peer_url(True))])
        await again.wait_ready()
        await poll(lambda: not left.running, deadline_s=10.0, what="the member left running ended")
        assert again.pid != left.pid and again.running
        assert await answers(cluster.client(0)), "the new member serves the same data"
    finally:
        await again.stop(grace_s=1.0)
        await cluster.close()
