"""Never twice, this computer's side (host/fleetrun/holding.py): a failover node gets a deadline ahead
only from a read of the store made under this computer's current, announced lease; on a fake boot
clock, with the lease calls faked (no etcd). Also the failover take's transaction (it compares that
the holder has no lease key) and the old holder's replicas after a take."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from cadre_desktop.host.fleetrun.failover import Failover
from cadre_desktop.host.fleetrun.holding import NO_LEASE, LeaseHold
from cadre_desktop.host.fleetrun.pushes import Pushes
from cadre_desktop.host.fleetstate.client import FleetClient
from cadre_desktop.host.fleetstate.shared import NodeShared, SharedState, lease_key, node_key
from cadre_desktop.settings import Settings
from cadre_desktop.wire.lease import LEASE_FILE, LeaseTerms, render

S = 1_000_000_000


class Boot:
    def __init__(self) -> None:
        self.ns = 1000 * S

    def __call__(self) -> int:
        return self.ns


class LeaseCalls:
    """A FleetClient's lease calls: each grant a new lease id; renewals answer `ttl`."""

    def __init__(self) -> None:
        self.granted = 0x50
        self.ttl = 3

    async def grant(self, ttl_s: int) -> int:
        self.granted += 1
        return self.granted

    async def refresh(self, lease_id: int, timeout_s: float | None = None) -> int:
        return self.ttl

    async def revoke(self, lease_id: int) -> None:
        pass


class Announcer:
    def __init__(self) -> None:
        self.announced: list[int] = []
        self.fail = False

    async def announce(self, computer: str, lease_id: int, ttl_ms: int) -> None:
        if self.fail:
            from cadre_desktop.host.fleetstate.errors import StoreUnavailable

            raise StoreUnavailable("no answer")
        self.announced.append(lease_id)


def as_state(announcer: Announcer) -> Callable[[], SharedState]:
    return lambda: cast(SharedState, announcer)


def mine(generation: int = 4, holder: str = "pc_a", node: str = "study") -> NodeShared:
    return NodeShared(node, holder=holder, generation=generation, failover=True)


def holding(tmp_path: Path, nodes: dict[str, NodeShared], boot: Boot) -> LeaseHold:
    return LeaseHold(ttl_ms=lambda: 3000, me=lambda: "pc_a", node_dir=lambda n: tmp_path / n, nodes=lambda: nodes,
                     now_ns=boot)


async def test_a_node_runs_on_a_deadline_ahead_only_once_a_read_under_the_announced_lease_found_it_here(
        tmp_path: Path) -> None:
    boot, calls, state, nodes = Boot(), LeaseCalls(), Announcer(), {"study": mine()}
    hold = holding(tmp_path, nodes, boot)
    state.fail = True
    try:
        await hold.ensure(cast(FleetClient, calls), as_state(state))
    except Exception:
        pass
    # Granted but not announced: the others see no lease key and may take the node, so no deadline ahead.
    assert hold.keeper is not None and hold.under() is None and hold.left_s() is None
    assert hold.terms("study") == LeaseTerms(4, 1) and hold.start_wait("study") == NO_LEASE
    state.fail = False
    before = hold.reading()  # a read that began before the announce: it confirms nothing
    await hold.ensure(cast(FleetClient, calls), as_state(state))
    assert state.announced == [0x51] and hold.under() == 0x51
    hold.confirm(nodes, None, before)
    assert hold.terms("study") == LeaseTerms(4, 1)
    hold.confirm(nodes, hold.under(), hold.reading())
    assert hold.terms("study") == LeaseTerms(4, hold.keeper.deadline_ns) and hold.start_wait("study") is None
    await hold.stop(revoke=False)


async def test_a_new_lease_after_a_lost_one_confirms_nothing_until_a_read_under_it(tmp_path: Path) -> None:
    """Regression (the never-twice checker's frozen computer): after the thaw the host got a new lease and
    moved its node's deadline on from the view it read under the lost one, so the old generation served on
    while another computer held the node."""
    boot, calls, state, nodes = Boot(), LeaseCalls(), Announcer(), {"study": mine()}
    hold = holding(tmp_path, nodes, boot)
    await hold.ensure(cast(FleetClient, calls), as_state(state))
    hold.confirm(nodes, hold.under(), hold.reading())
    assert hold.held("study") == 4
    boot.ns += 10 * S  # frozen past the lease: the renewal finds it gone
    assert hold.held("study") is None and hold.start_wait("study") == NO_LEASE
    calls.ttl = 0
    assert hold.keeper is not None and not await hold.keeper.renew()
    await hold.ensure(cast(FleetClient, calls), as_state(state))
    assert state.announced == [0x51, 0x52] and hold.under() == 0x52
    assert hold.held("study") is None and hold.terms("study") == LeaseTerms(4, 1)
    nodes["study"] = mine(5, holder="pc_b")  # the read under the new lease: taken meanwhile
    hold.confirm(nodes, hold.under(), hold.reading())
    assert hold.terms("study") == LeaseTerms(5, 1)
    await hold.stop(revoke=False)


async def test_a_later_generation_seen_anywhere_outdates_the_confirmation_and_a_take_outlives_an_older_read(
        tmp_path: Path) -> None:
    boot, calls, state, nodes = Boot(), LeaseCalls(), Announcer(), {"study": mine()}
    hold = holding(tmp_path, nodes, boot)
    await hold.ensure(cast(FleetClient, calls), as_state(state))
    lease = hold.under()
    old_read = hold.reading()
    hold.confirm_one("other", 7, lease, hold.reading())  # this computer's take, after the read began
    hold.confirm({"study": mine()}, lease, old_read)  # the read did not see the take: it stays
    assert hold.held("other") == 7 and hold.held("study") == 4
    nodes["study"] = mine(5, holder="pc_b")  # the store's own read saw a move or a take
    assert hold.terms("study") == LeaseTerms(5, 1)
    await hold.stop(revoke=False)


def test_before_any_read_the_last_lease_file_holds_after_one_an_unknown_node_is_outside_failover(
        tmp_path: Path) -> None:
    boot, nodes = Boot(), dict[str, NodeShared]()
    hold = holding(tmp_path, nodes, boot)
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / LEASE_FILE).write_bytes(render(LeaseTerms(3, 1005 * S)))
    assert hold.terms("study") == LeaseTerms(3, 1005 * S) and hold.start_wait("study") is None
    boot.ns = 1006 * S
    assert hold.start_wait("study") == NO_LEASE  # its kept deadline passed: it waits for the store
    assert hold.terms("plain") is None and hold.start_wait("plain") is None
    hold.confirm({}, None, hold.reading(), unreadable={"broken"})
    assert hold.terms("study") is None  # the store has no keys for it: not a failover node
    assert hold.terms("broken") == LeaseTerms(1, 1)  # keys that cannot be read: never a deadline ahead


class Ops:
    """aetcd's transaction builders, recording what is compared."""

    class Target:
        def __init__(self, kind: str, key: bytes) -> None:
            self.kind, self.key = kind, key

        def __eq__(self, other: object) -> Any:
            return (self.kind, self.key, other)

    def version(self, key: bytes) -> Target:
        return Ops.Target("version", key)

    def value(self, key: bytes) -> Target:
        return Ops.Target("value", key)

    def put(self, key: bytes, value: bytes) -> tuple[str, bytes, bytes]:
        return ("put", key, value)

    def get(self, key: bytes, end: bytes) -> tuple[str, bytes]:
        return ("get", key)


class TxClient:
    def __init__(self) -> None:
        self.ops = Ops()
        self.compared: list[Any] = []

    async def transaction(self, compare: list[Any], success: list[Any], failure: list[Any]) -> tuple[bool, list[Any]]:
        self.compared = compare
        return True, []


async def test_a_failover_take_holds_only_while_the_lost_holder_has_no_lease_key_and_a_move_s_needs_none() -> None:
    client = TxClient()
    state = SharedState(client)  # type: ignore[arg-type]
    assert (await state.take("study", "pc_c", 4, holder="pc_b", mark_at=1.0, lost=True)).won
    assert ("version", lease_key("pc_b"), 0) in client.compared
    assert ("value", node_key("study", "generation"), b"4") in client.compared
    await state.take("study", "pc_c", 4, holder="pc_b", mark_at=1.0)  # a move: its holder is alive
    assert all(c[1] != lease_key("pc_b") for c in client.compared)


def test_an_old_holder_leaves_the_replicas_a_taker_may_need_and_drops_them_when_failover_goes_off() -> None:
    """Regression (the never-twice checker's second failover, never taken): the computer that lost its node
    dropped the replicas it had sent, before the new holder had sent its own, so no computer could take
    the node when the new holder went too."""
    asked: list[tuple[str, str]] = []

    async def ask(computer: Any, method: str, path: str, body: Any, timeout_s: float) -> tuple[int, Any]:
        asked.append((computer.id, path))
        return 200, {}

    async def drop_unpaired(paired: Any) -> None:
        pass
    computers = [SimpleNamespace(id="pc_b", name="B"), SimpleNamespace(id="pc_c", name="C")]
    pushes = Pushes(me=lambda: "pc_a", computers=lambda: cast(Any, computers), local=cast(Any, None),
                    replicas=cast(Any, SimpleNamespace(drop_unpaired=drop_unpaired)), ask=ask, held=lambda nodes: [])
    pushes.pushed["study"] = "digest"
    asyncio.run(pushes.replicate({"study": mine(5, holder="pc_b")}))
    assert asked == [] and "study" not in pushes.pushed
    pushes.pushed["study"] = "digest"
    asyncio.run(pushes.replicate({"study": NodeShared("study", holder="pc_a", generation=5, failover=False)}))
    assert asked == [("pc_b", "/fleet/run/replica/drop"), ("pc_c", "/fleet/run/replica/drop")]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_fallback_taker_takes_two_lease_times_after_it_saw_the_holder_s_lease_gone_counted_per_generation(
) -> None:
    """The first choice of taker (the smallest alive id but the holder) may hold no replica: any other
    computer with one then takes after two lease times (`fleet_lease_ms` 3000: 6 s), never sooner, and a
    count of an earlier holder's generation is no head start."""
    clock = Clock()
    f = Failover(settings=lambda: Settings(fleet_lease_ms=3000), me=lambda: "pc_c", computers=lambda: cast(Any, []),
                 store=cast(Any, SimpleNamespace(nodes={})), local=cast(Any, SimpleNamespace(node_dir=Path)),
                 hooks=cast(Any, None), replicas=cast(Any, None), ask=cast(Any, None), monotonic=clock)
    alive = frozenset({"pc_b", "pc_c"})
    gone = mine(5, holder="pc_a")
    assert f.notes.lost_for(gone, alive) == 0.0
    clock.t += 5.9
    assert f.notes.lost_for(gone, alive) < 6.0
    clock.t += 0.1
    assert f.notes.lost_for(gone, alive) >= 6.0
    assert f.notes.lost_for(mine(6, holder="pc_b"), frozenset({"pc_c"})) == 0.0  # another generation: counted anew
    assert f.notes.lost_for(mine(6, holder="pc_b"), frozenset({"pc_b", "pc_c"})) == 0.0 and "study" not in f.notes.dead_since


async def test_failover_turned_off_ends_the_confirmation_at_once(tmp_path: Path) -> None:
    boot, calls, state, nodes = Boot(), LeaseCalls(), Announcer(), {"study": mine()}
    hold = holding(tmp_path, nodes, boot)
    await hold.ensure(cast(FleetClient, calls), as_state(state))
    hold.confirm(nodes, hold.under(), hold.reading())
    assert hold.live_terms("study") is not None
    nodes["study"] = NodeShared("study", holder="pc_a", generation=4, failover=False)
    assert hold.live_terms("study") is None and hold.terms("study") is None  # started as any node again
    await hold.stop(revoke=False)


def test_a_lease_file_from_before_this_boot_gives_no_deadline_ahead(tmp_path: Path) -> None:
    """A reboot restarts the boot clock from zero: the last boot's deadline could lie hours ahead now."""
    import os

    boot, nodes = Boot(), dict[str, NodeShared]()
    hold = LeaseHold(ttl_ms=lambda: 3000, me=lambda: "pc_a", node_dir=lambda n: tmp_path / n, nodes=lambda: nodes,
                     now_ns=boot, booted_at=lambda: 2_000_000_000.0)
    (tmp_path / "study").mkdir()
    kept = tmp_path / "study" / LEASE_FILE
    kept.write_bytes(render(LeaseTerms(3, 5000 * S)))
    os.utime(kept, (1_999_999_000.0, 1_999_999_000.0))
    assert hold.terms("study") == LeaseTerms(3, 1) and hold.start_wait("study") == NO_LEASE
    os.utime(kept, (2_000_000_100.0, 2_000_000_100.0))
    assert hold.terms("study") == LeaseTerms(3, 5000 * S)


async def test_the_computers_keeping_a_node_s_replica_are_in_the_store_for_the_takers_to_choose_among() -> None:
    """Regression (the never-twice bench): the first choice of taker was a computer without the replica
    (the new holder's push had not reached it), so the node waited for the fallback: lease + 30 s."""
    from cadre_desktop.host.fleetstate.shared import parse_node

    written: dict[bytes, bytes] = {}

    class KeyClient:
        async def put(self, key: bytes, value: bytes, lease_id: int | None = None) -> None:
            written[key] = value

        async def delete(self, key: bytes) -> None:
            written.pop(key, None)
    state = SharedState(cast(FleetClient, KeyClient()))
    await state.keeps_replica("study", "pc_c", 5)
    await state.keeps_replica("study", "pc_b", 5)
    await state.keeps_replica("study", "pc_b", None)
    found = parse_node("study", {**written, node_key("study", "holder"): b"pc_a",
                                 node_key("study", "replicas/bad\x1bid"): b"1"})
    assert found.replicas == frozenset({"pc_c"}) and found.holder == "pc_a"
