"""Where etcd's leader goes (host/fleetrun/leadership.py) on a fake store client and a fake clock,
and failover's pass woken by a lease key's deletion (failover.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from cadre_desktop.host.fleetrun.failover import Failover
from cadre_desktop.host.fleetrun.leadership import LeaderPlacement, leader_target
from cadre_desktop.host.fleetstate.client import MemberInfo
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.shared import lease_key
from cadre_desktop.settings import Settings

VOTERS = {"pc_a": 1, "pc_b": 2, "pc_c": 3}
EVERYONE = {"pc_a", "pc_b", "pc_c"}


def test_the_leadership_goes_to_the_alive_voter_holding_the_fewest_failover_nodes() -> None:
    assert leader_target("pc_a", {"pc_a": 2, "pc_b": 1, "pc_c": 0}, EVERYONE, VOTERS) == 3
    assert leader_target("pc_a", {"pc_a": 1}, EVERYONE, VOTERS) == 2  # a tie: the smallest id
    assert leader_target("pc_a", {"pc_a": 1}, EVERYONE, {"pc_a": 1, "pc_c": 3}) == 3  # pc_b is a learner


def test_the_leadership_stays_when_no_one_holds_fewer_or_this_computer_holds_none() -> None:
    assert leader_target("pc_a", {}, EVERYONE, VOTERS) is None
    assert leader_target("pc_a", {"pc_a": 1, "pc_b": 1, "pc_c": 1}, EVERYONE, VOTERS) is None
    assert leader_target("pc_a", {"pc_a": 1, "pc_b": 2, "pc_c": 1}, EVERYONE, VOTERS) is None
    assert leader_target("pc_a", {"pc_a": 1}, {"pc_a"}, VOTERS) is None  # no one else alive
    # A voter's computer without a lease (asleep, cut off): the cluster is short, a hand-over could
    # leave it with no leader for longer; it stays.
    assert leader_target("pc_a", {"pc_a": 1}, {"pc_a", "pc_c"}, VOTERS) is None


class FakeClient:
    def __init__(self, leader: int, *, fail: bool = False) -> None:
        self.leader, self.fail = leader, fail
        self.calls: list[str] = []
        self.moved_to: list[int] = []
        self.closed = 0

    async def status(self) -> tuple[int, int]:
        self.calls.append("status")
        if self.fail:
            raise StoreUnavailable("the fleet's store did not answer a status within 3 s")
        return self.leader, self.leader

    async def members(self) -> list[MemberInfo]:
        self.calls.append("members")
        return [MemberInfo(1, "pc_a", (), ()), MemberInfo(2, "pc_b", (), (), learner=True), MemberInfo(3, "pc_c", (), ())]

    async def move_leader(self, member_id: int) -> None:
        self.moved_to.append(member_id)

    async def close(self) -> None:
        self.closed += 1


def placement(client: FakeClient, own: FakeClient, clock: list[float], me: str = "pc_a") -> LeaderPlacement:
    async def alive() -> set[str]:
        return set(EVERYONE)
    return LeaderPlacement(me=lambda: me, client=lambda: client, own=lambda: own,  # type: ignore[arg-type,return-value]
                           alive=alive, every_s=10.0, monotonic=lambda: clock[0])


def test_a_leading_holder_hands_the_lead_to_a_voter_holding_fewer_through_its_own_member() -> None:
    client, own, clock = FakeClient(leader=1), FakeClient(leader=1), [100.0]
    lead = placement(client, own, clock)
    asyncio.run(lead.check({"pc_a": 1}))
    assert client.calls == [] and own.moved_to == []  # the holdings just changed: not in a failover's middle
    clock[0] += 30.0
    asyncio.run(lead.check({"pc_a": 1}))
    assert own.moved_to == [3] and own.closed == 1  # pc_b is a learner: pc_c
    assert (lead.moves, lead.moved_to) == (1, "pc_c") and client.moved_to == []


def test_the_place_is_looked_at_again_only_when_holdings_change_or_the_period_passes() -> None:
    client, own, clock = FakeClient(leader=3), FakeClient(leader=3), [100.0]
    lead = placement(client, own, clock)
    asyncio.run(lead.check({"pc_a": 1}))
    clock[0] += 10.0
    asyncio.run(lead.check({"pc_a": 1}))  # settled: pc_c leads, nothing to hand on
    assert client.calls == ["status", "members"] and own.moved_to == []
    clock[0] += 9.0
    asyncio.run(lead.check({"pc_a": 1}))
    assert len(client.calls) == 2  # inside the period: not asked
    asyncio.run(lead.check({"pc_a": 2}))
    clock[0] += 9.0
    asyncio.run(lead.check({"pc_a": 2}))
    assert len(client.calls) == 2  # they changed 9 s ago: not settled yet
    clock[0] += 1.0
    asyncio.run(lead.check({"pc_a": 2}))
    assert client.calls[2:] == ["status"]  # settled; a leader it knows: no member list again
    clock[0] += 31.0
    asyncio.run(lead.check({"pc_b": 1}))
    clock[0] += 31.0
    asyncio.run(lead.check({"pc_b": 1}))
    assert len(client.calls) == 3  # this computer holds none: nothing to hand over, nothing asked


def test_a_store_that_does_not_answer_leaves_the_lead_where_it_is() -> None:
    client, own, clock = FakeClient(leader=1, fail=True), FakeClient(leader=1), [100.0]
    lead = placement(client, own, clock)
    asyncio.run(lead.check({"pc_a": 1}))
    clock[0] += 10.0
    asyncio.run(lead.check({"pc_a": 1}))
    assert client.calls == ["status"] and lead.moves == 0 and own.moved_to == []


def test_a_pass_is_woken_by_another_computer_s_lease_key_going_and_by_the_watch_s_start() -> None:
    store = SimpleNamespace(nodes={}, state="ready", client=None, member=None)
    local = SimpleNamespace(node_dir=lambda node_id: node_id)
    f = Failover(settings=lambda: Settings(), me=lambda: "pc_a", computers=lambda: [], store=store,  # type: ignore[arg-type]
                 local=local, hooks=None, replicas=None, ask=None)  # type: ignore[arg-type]
    wake: Any = f._wake
    f.expiries.deleted([lease_key("pc_a"), b"/cadre/fleet/v1/computers/pc_b/other"])
    assert not wake.is_set()  # its own lease, and a key that is no lease key
    f.expiries.deleted([lease_key("pc_b")])
    assert wake.is_set()
    wake.clear()
    f.expiries.deleted([])  # the watch made (again): a pass catches up on what it missed
    assert wake.is_set()
