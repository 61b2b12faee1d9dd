"""The fleet's shared state without etcd (host/fleetstate/): what is read back is hostile until
checked, the lease keeper's renewals and deadline on a fake boot clock, and a store that does
not answer is a bounded `StoreUnavailable`, never a hang."""

from __future__ import annotations

import socket
import time

import pytest

from cadre_desktop.host.fleetstate.client import Endpoint, FleetClient
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.leases import LeaseKeeper, extend_node, node_terms, safety_ns
from cadre_desktop.host.fleetstate.shared import SharedStateInvalid, StartMark, lease_key, node_key, node_prefix, parse_node
from cadre_desktop.wire import lease as wire_lease
from cadre_desktop.wire.lease import LeaseTerms

S = 1_000_000_000


def keys(node: str, **fields: bytes) -> dict[bytes, bytes]:
    return {node_key(node, name): value for name, value in fields.items()}


def test_a_node_s_keys_read_back_whole() -> None:
    mark = StartMark(3, 1700.5, "nas", 2, "never answered").encode()
    found = parse_node("study", keys("study", holder=b"nas", generation=b"3", start=mark, served=b"2", failover=b"on"))
    assert (found.holder, found.generation, found.served, found.failover) == ("nas", 3, 2, True)
    assert found.mark == StartMark(3, 1700.5, "nas", 2, "never answered") and not found.mark_spent
    assert parse_node("study", {}).generation == 0 and parse_node("study", {}).mark_spent


def test_another_node_s_keys_are_not_taken_for_this_one_s() -> None:
    assert parse_node("study", keys("study-2", holder=b"nas", generation=b"9")).holder is None


@pytest.mark.parametrize("field,value", [("generation", b"-1"), ("generation", b"9" * 30), ("holder", b"a/b"),
                                         ("holder", b"\x1b[2J"), ("served", b"x")])
def test_a_hostile_value_is_refused_in_words(field: str, value: bytes) -> None:
    with pytest.raises(SharedStateInvalid):
        parse_node("study", keys("study", **{field: value}))


@pytest.mark.parametrize("mark", [b"[]", b"{", b'{"version": 2}', b'{"version": 1, "generation": 0, "at": 1, "by": "a",'
                                  b' "failures": 0}', b'{"version": 1, "generation": 1, "at": 1, "by": "\\u001b",'
                                  b' "failures": 0}', b"x" * 5000])
def test_an_unreadable_start_mark_gives_no_grace(mark: bytes) -> None:
    assert parse_node("study", keys("study", holder=b"a", generation=b"1", start=mark)).mark is None


def test_ids_that_would_escape_their_key_are_refused() -> None:
    assert node_prefix("study") == b"/cadre/fleet/v1/nodes/study/"
    assert lease_key("nas") == b"/cadre/fleet/v1/computers/nas/lease"
    for bad in ("../x", "a/b", "", "x" * 200):
        with pytest.raises(ValueError):
            node_prefix(bad)


class Boot:
    def __init__(self) -> None:
        self.ns = 1000 * S

    def __call__(self) -> int:
        return self.ns


class FakeStore:
    """The lease calls of a FleetClient: grants, renewals that answer a TTL (or fail), revokes."""

    def __init__(self) -> None:
        self.ttl = 2
        self.fail = False
        self.renewals = 0
        self.revoked: list[int] = []
        self.bounds: list[float | None] = []

    async def grant(self, ttl_s: int) -> int:
        return 0x51

    async def refresh(self, lease_id: int, timeout_s: float | None = None) -> int:
        self.renewals += 1
        self.bounds.append(timeout_s)
        if self.fail:
            raise StoreUnavailable("no answer")
        return self.ttl

    async def revoke(self, lease_id: int) -> None:
        self.revoked.append(lease_id)


async def test_the_lease_deadline_is_the_last_acknowledged_renewal_plus_its_time_to_live_less_a_margin() -> None:
    boot, store = Boot(), FakeStore()
    keeper = LeaseKeeper(store, ttl_ms=2000, now_ns=boot)  # type: ignore[arg-type]
    await keeper.start()
    assert keeper.deadline_ns == 1000 * S + 2 * S - safety_ns(2000)
    boot.ns += S
    assert await keeper.renew() and keeper.deadline_ns == 1001 * S + 2 * S - safety_ns(2000)
    assert store.bounds == [0.5]  # a fifth of the lease, at least half a second: it fails while the lease lasts
    longer = LeaseKeeper(store, ttl_ms=15000, now_ns=boot)  # type: ignore[arg-type]
    await longer.start()
    assert await longer.renew() and store.bounds[-1] == 3.0
    await longer.stop(revoke=False)
    store.fail = True
    boot.ns += S
    with pytest.raises(StoreUnavailable):
        await keeper.renew()
    assert keeper.deadline_ns == 1001 * S + 2 * S - safety_ns(2000)  # a failed renewal moves nothing
    boot.ns = keeper.deadline_ns
    assert not keeper.valid()
    await keeper.stop()
    assert store.revoked == [0x51]


async def test_a_renewal_that_finds_the_lease_gone_loses_it_for_good() -> None:
    store, lost = FakeStore(), list[int]()
    keeper = LeaseKeeper(store, ttl_ms=2000, now_ns=Boot(), on_lost=lambda: lost.append(1))  # type: ignore[arg-type]
    await keeper.start()
    store.ttl = 0
    assert not await keeper.renew()
    assert keeper.lost and lost == [1] and keeper.deadline_ns == 0 and not keeper.valid()
    await keeper.stop()
    assert store.revoked == []  # an expired lease is not revoked


def test_the_safety_margin_is_a_tenth_bounded() -> None:
    assert safety_ns(15000) == 1_500_000_000
    assert safety_ns(1000) == 500_000_000
    assert safety_ns(120_000) == 3_000_000_000


async def test_a_store_that_never_answers_is_unavailable_within_the_call_s_bound() -> None:
    with socket.socket() as mute:  # accepts connections (the kernel's backlog) and never speaks
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        client = FleetClient([Endpoint("127.0.0.1", mute.getsockname()[1])], None, timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="did not answer a read within 0.5 s|refused a read"):
            await client.get(b"/cadre/fleet/v1/x")
        assert time.monotonic() - started < 3.0
        await client.close()


async def test_the_host_moves_a_node_s_deadline_in_the_node_s_own_format(tmp_path) -> None:
    boot, store = Boot(), FakeStore()
    keeper = LeaseKeeper(store, ttl_ms=15000, now_ns=boot)  # type: ignore[arg-type]
    await keeper.start()
    terms = node_terms(7, keeper)
    extend_node(tmp_path, terms)
    written = tmp_path / wire_lease.LEASE_FILE
    assert wire_lease.parse(written.read_bytes()) == LeaseTerms(7, keeper.deadline_ns)
    assert written.stat().st_mode & 0o777 == 0o600
    await keeper.stop()
