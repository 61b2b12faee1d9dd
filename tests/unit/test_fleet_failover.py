"""Failover's parts without etcd or a host (host/fleetrun/failover.py, replicas.py): a replica kept
encrypted 0600 and read back, hostile replicas refused, replicas of an unpaired computer dropped,
failover refused in words outside a fleet of three, a failover node's start given its lease, and
etcd's election timeout following the lease."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cadre_desktop.errors import Invalid
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleetrun.failover import Failover
from cadre_desktop.host.fleetrun.replicas import REPLICA_FILE, Replicas
from cadre_desktop.host.fleetrun.store import election_for
from cadre_desktop.host.fleetstate.shared import NodeShared
from cadre_desktop.host.fleetstate.takeover import THIRD_COMPUTER
from cadre_desktop.settings import Settings
from cadre_desktop.wire.lease import DEADLINE_VAR, GENERATION_VAR


class DictSecrets:
    """A keyring in memory."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, SecretKind], str] = {}

    async def get(self, node_id: str, kind: SecretKind) -> str | None:
        return self.kept.get((node_id, kind))

    async def set(self, node_id: str, kind: SecretKind, value: str) -> None:
        self.kept[(node_id, kind)] = value


def replica_doc(node_id: str = "n1", **over: Any) -> dict[str, Any]:
    node = {"id": node_id, "name": "Study", "cadre": "family", "status": "joined",
            "created_at": "2026-12-07T12:00:00Z"}
    doc = {"node": node, "secret": "s3cret-claim", "generation": 2,
           "files": {"identity.json": base64.b64encode(b'{"peer":"p1"}').decode()}}
    doc.update(over)
    return doc


def computer(cid: str) -> Computer:
    return Computer(id=cid, name=cid.upper(), address="127.0.0.1:1", fingerprint="f", cert="c", paired_at="t")


def test_a_replica_is_kept_encrypted_0600_and_read_back(tmp_path: Path) -> None:
    secrets = DictSecrets()
    replicas = Replicas(tmp_path / "replicas", secrets)  # type: ignore[arg-type]

    async def go() -> Any:
        assert await replicas.keep("pc_b", replica_doc()) == "n1"
        return await replicas.read("n1")
    replica = asyncio.run(go())
    sealed = tmp_path / "replicas" / "n1" / REPLICA_FILE
    assert sealed.stat().st_mode & 0o777 == 0o600
    raw = sealed.read_bytes()
    assert b"s3cret-claim" not in raw and b"Study" not in raw
    assert (replica.record.id, replica.record.name, replica.secret, replica.generation, replica.source) == \
        ("n1", "Study", "s3cret-claim", 2, "pc_b")
    assert replica.files == {"identity.json": b'{"peer":"p1"}'}
    assert (("replicas", SecretKind.REPLICA_KEY)) in secrets.kept  # the key in the keyring, not in a file
    assert not any(secrets.kept[("replicas", SecretKind.REPLICA_KEY)].encode() in p.read_bytes()
                   for p in (tmp_path / "replicas").rglob("*") if p.is_file())


@pytest.mark.parametrize("doc", [
    None, [], {"node": {}}, replica_doc(secret="two\nlines"), replica_doc(generation="2"),
    replica_doc(files={"../escape": "AAAA"}), replica_doc(files={"a": "not base64!"}),
    replica_doc(files={"big": base64.b64encode(os.urandom(50 * 1024)).decode()}),
    replica_doc(node_id="../../etc"),
])
def test_a_hostile_replica_is_refused_and_nothing_is_written(tmp_path: Path, doc: Any) -> None:
    replicas = Replicas(tmp_path / "replicas", DictSecrets())  # type: ignore[arg-type]
    with pytest.raises(Invalid):
        asyncio.run(replicas.keep("pc_b", doc))
    assert not (tmp_path / "replicas").exists() or not any((tmp_path / "replicas").iterdir())


def test_a_replica_whose_computer_is_no_longer_paired_is_dropped(tmp_path: Path) -> None:
    replicas = Replicas(tmp_path / "replicas", DictSecrets())  # type: ignore[arg-type]

    async def go() -> None:
        await replicas.keep("pc_b", replica_doc("n1"))
        await replicas.keep("pc_c", replica_doc("n2"))
        await replicas.drop_unpaired(lambda source: source == "pc_c")
    asyncio.run(go())
    assert not replicas.has("n1") and replicas.has("n2")


def failover(computers: list[Computer], nodes: dict[str, NodeShared] | None = None, root: Path | None = None,
             **settings: Any) -> Failover:
    store = SimpleNamespace(nodes=nodes or {}, state="ready", client=None)
    local = SimpleNamespace(node_dir=lambda node_id: (root or Path("/nonexistent")) / node_id)
    return Failover(settings=lambda: Settings(**settings), me=lambda: "pc_a", computers=lambda: computers,
                    store=store, local=local, hooks=None, replicas=None, ask=None)  # type: ignore[arg-type]


def test_failover_is_refused_in_words_outside_a_fleet_of_three() -> None:
    assert "in no fleet" in (failover([]).refusal() or "")
    assert THIRD_COMPUTER in (failover([computer("pc_b")]).refusal() or "")
    assert failover([computer("pc_b"), computer("pc_c")]).refusal() is None


def test_a_failover_node_held_here_starts_under_the_lease_and_any_other_without() -> None:
    nodes = {"held": NodeShared("held", holder="pc_a", generation=4, failover=True),
             "off": NodeShared("off", holder="pc_a", generation=4, failover=False),
             "theirs": NodeShared("theirs", holder="pc_b", generation=4, failover=True)}
    f = failover([computer("pc_b"), computer("pc_c")], nodes)
    f.hold.keeper = SimpleNamespace(deadline_ns=10**18, lost=False, lease_id=7, renewed_ns=1)  # type: ignore[assignment]
    f.hold.announced = 7
    f.hold.confirm(nodes, f.hold.under(), f.hold.reading())  # a read under the announced lease
    assert f.lease_env("held") == {GENERATION_VAR: "4", DEADLINE_VAR: str(10**18)}
    assert f.lease_env("off") == {} and f.lease_env("unknown") == {}
    # Another computer holds it: a copy started here anyway never serves.
    assert f.lease_env("theirs") == {GENERATION_VAR: "4", DEADLINE_VAR: "1"}
    f.hold.keeper = None
    # No valid lease: a deadline already past, so the node never serves without one.
    assert f.lease_env("held") == {GENERATION_VAR: "4", DEADLINE_VAR: "1"}


def test_etcd_s_election_timeout_follows_the_lease() -> None:
    assert election_for(15000) == 5000 and election_for(3000) == 1000 and election_for(6000) == 2000
    assert election_for(600_000) == 5000


def test_a_replica_is_dropped_only_by_the_computer_that_sent_it(tmp_path: Path) -> None:
    replicas = Replicas(tmp_path / "replicas", DictSecrets())  # type: ignore[arg-type]

    async def go() -> tuple[bool, bool]:
        await replicas.keep("pc_c", replica_doc("n1"))  # the node's new holder sent it
        by_old_holder = await replicas.drop("n1", source="pc_b")
        by_sender = await replicas.drop("n1", source="pc_c")
        return by_old_holder, by_sender
    assert asyncio.run(go()) == (False, True) and not replicas.has("n1")


def test_a_restarted_host_starts_a_failover_node_under_its_last_lease_file_before_the_store_answers(
        tmp_path: Path) -> None:
    """Regression (found by the never-twice checker): a host restarted after a kill -9 started its
    failover node with no lease terms before its store had been read, and that copy kept answering
    while another computer held the node at a higher generation."""
    from cadre_desktop.wire.lease import LEASE_FILE, LeaseTerms, render

    (tmp_path / "held").mkdir()
    (tmp_path / "held" / LEASE_FILE).write_bytes(render(LeaseTerms(3, 123456789)))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / LEASE_FILE).write_bytes(b"{not json")
    f = failover([computer("pc_b"), computer("pc_c")], {}, root=tmp_path)
    assert f.lease_env("held") == {GENERATION_VAR: "3", DEADLINE_VAR: "123456789"}
    assert f.lease_env("broken")[DEADLINE_VAR] == "1"
    assert f.lease_env("plain") == {}  # never a failover node here: started as always


def test_a_held_node_near_its_deadline_is_stopped_by_its_lease_file_not_paused_and_runs_again_under_a_lease(
        tmp_path: Path) -> None:
    """Renewals failing: the copy's deadline is brought forward (it stops by itself, and the supervisor
    waits for a lease), never a person's pause, which a host restarted meanwhile would never lift.
    Held again under a valid lease: the deadline moves on and the note goes."""
    from cadre_desktop.wire.lease import read as read_lease

    nodes = {"held": NodeShared("held", holder="pc_a", generation=4, failover=True)}
    (tmp_path / "held").mkdir()
    f = failover([computer("pc_b"), computer("pc_c")], nodes, root=tmp_path)
    paused: list[str] = []

    async def pause(node_id: str) -> None:
        paused.append(node_id)
    f.local.pause = pause  # type: ignore[misc]
    record = SimpleNamespace(id="held")
    f.hooks = SimpleNamespace(records=lambda: [record], moving=lambda node_id: False)  # type: ignore[assignment]
    keeper = SimpleNamespace(lost=False, lease_id=7, renewed_ns=1, deadline_ns=10**18)
    f.hold.keeper = keeper  # type: ignore[assignment]
    f.hold.announced = 7
    f.hold.confirm(nodes, f.hold.under(), f.hold.reading())
    asyncio.run(f._guard(nodes))
    assert "held" not in f.stopped and read_lease(tmp_path / "held") is None  # the deadline far ahead: nothing

    from cadre_desktop.wire.lease import boot_ns
    keeper.deadline_ns = boot_ns() + 100_000_000  # 0.1 s left: under the guard
    asyncio.run(f._guard(nodes))
    kept = read_lease(tmp_path / "held")
    assert f.stopped["held"].startswith("stopped:") and paused == []
    assert kept is not None and (kept.generation, kept.deadline_ns) == (4, 1)

    keeper.deadline_ns = boot_ns() + 60 * 10**9  # renewed: the lease lies far ahead again
    asyncio.run(f._hold(nodes))
    kept = read_lease(tmp_path / "held")
    assert "held" not in f.stopped and kept is not None and kept.deadline_ns == keeper.deadline_ns


def test_a_node_taken_back_here_is_no_longer_stopped_and_runs_under_the_lease(tmp_path: Path) -> None:
    """Regression (never-twice bench, settled freezes): a node this computer had lost ("held by charlie
    now") and then took back stayed in `stopped` until the next pass, so the deadline watch did not move
    its deadline on and its view said it was stopped while it served."""
    from cadre_desktop.host.core.records.records import NodeStatus
    from cadre_desktop.wire.lease import read as read_lease

    record = SimpleNamespace(id="n1", name="Study")
    replica = SimpleNamespace(record=record, status=NodeStatus.JOINED, secret="s3cret-claim",
                              files={"identity.json": b'{"peer":"p1"}'})
    adopted: list[str] = []

    async def read(node_id: str) -> Any:
        return replica

    async def drop(node_id: str) -> bool:
        return True

    async def take(node_id: str, me: str, expected: int, **_: Any) -> Any:
        return SimpleNamespace(won=True, generation=expected + 1)

    async def adopt(rec: Any, secret: str, status: Any) -> None:
        adopted.append(rec.id)

    f = failover([computer("pc_b"), computer("pc_c")], {}, root=tmp_path)
    f.replicas = SimpleNamespace(read=read, drop=drop)  # type: ignore[assignment]
    store: Any = f.store
    local: Any = f.local
    store.store, local.adopt = (lambda: SimpleNamespace(take=take)), adopt
    f.hooks = SimpleNamespace(failed_over=lambda *a: None)  # type: ignore[assignment]
    keeper = SimpleNamespace(lost=False, lease_id=7, renewed_ns=1, deadline_ns=10**18)
    f.hold.keeper = keeper  # type: ignore[assignment]
    f.hold.announced = 7
    f.stopped["n1"] = "held by PC_C now"
    shared = NodeShared("n1", holder="pc_x", generation=4, failover=True)

    asyncio.run(f._take(shared, 4, "pc_x", "pc_x's lease expired", 0, None))
    kept = read_lease(tmp_path / "n1")
    assert adopted == ["n1"] and "n1" not in f.stopped
    assert kept is not None and (kept.generation, kept.deadline_ns) == (5, 10**18)
