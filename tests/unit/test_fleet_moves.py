"""A planned move's steps and refusals on fakes (host/fleetrun/moves.py, bundle.py): one take to the
target at g+1, the old copy paused then removed only once the new one serves with the same peer id;
every refusal before the take changes nothing, every failure after it gives the node back (g+2)."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cadre_desktop.errors import CadreError, Invalid, InvalidState, NoSuchThing
from cadre_desktop.host.core.records.records import NodeMode, NodeRecord, NodeStatus
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleet.peers import LinkDown
from cadre_desktop.host.fleetrun.bundle import MAX_BYTES, check_bundle, read_bundle, write_bundle
from cadre_desktop.host.fleetrun.moves import LocalSide, Mover
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.shared import NodeShared, TakeResult
from tests.support.fake_host import STAMP, make_view


class FakeShared:
    """The store's `take`, as etcd's transaction does it: compare generation and holder, then write."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeShared] = {}
        self.takes: list[tuple[str, str, int]] = []
        self.down = False

    async def take(self, node: str, computer: str, expected: int, *, holder: str | None, mark_at: float,
                   failures: int = 0, last_exit: str | None = None) -> TakeResult:
        if self.down:
            raise StoreUnavailable("the fleet's store did not answer a transaction within 3 s")
        now = self.nodes.get(node, NodeShared(node))
        if now.generation != expected or now.holder != holder:
            return TakeResult(False, now.generation, now)
        self.nodes[node] = replace(now, holder=computer, generation=expected + 1)
        self.takes.append((node, computer, expected + 1))
        return TakeResult(True, expected + 1)


class FakeStore:
    def __init__(self, shared: FakeShared) -> None:
        self.shared = shared

    def store(self) -> FakeShared:
        if self.shared.down:
            raise StoreUnavailable("the fleet's store is not available: it did not answer")
        return self.shared

    async def refresh(self, node: str) -> NodeShared:
        return self.store().nodes.get(node, NodeShared(node))


def computer(cid: str, name: str) -> Computer:
    return Computer(id=cid, name=name, address="127.0.0.1:1", fingerprint="f" * 64, cert="", paired_at=STAMP)


class Side:
    """One computer's host as a move sees it: records, views, secrets, work folders."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records: dict[str, NodeRecord] = {}
        self.views: dict[str, Any] = {}
        self.secrets: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []

    def add(self, node_id: str, **view: Any) -> None:
        self.records[node_id] = NodeRecord(id=node_id, name="Study", status=NodeStatus.JOINED, mode=NodeMode.CLAIM,
                                           cadre="family", created_at=STAMP, updated_at=STAMP, cpu_percent=50)
        self.views[node_id] = make_view(node_id, "Study", NodeStatus.JOINED, cadre="family", **view)
        self.secrets[node_id] = "claim-secret-" + node_id
        folder = self.root / node_id
        folder.mkdir(parents=True)
        (folder / "identity.json").write_text('{"version": 1}')
        (folder / "node-state.json").write_text('{"membership": "joined"}')
        (folder / "node.lock").write_text("4242")

    def local(self) -> LocalSide:
        async def secret(node_id: str) -> str | None:
            return self.secrets.get(node_id)

        async def act(what: str, node_id: str) -> bool:
            self.calls.append((what, node_id))
            if what == "remove":
                self.records.pop(node_id, None)
                self.views.pop(node_id, None)
            return True

        async def adopt(record: NodeRecord, secret_: str, status: NodeStatus) -> NodeRecord:
            self.calls.append(("adopt", record.id))
            self.records[record.id] = record
            self.secrets[record.id] = secret_
            self.views[record.id] = make_view(record.id, record.name, status, cadre=record.cadre)
            return record

        def view(node_id: str) -> Any:
            if node_id not in self.views:
                raise NoSuchThing(f"There is no node {node_id!r} on this host.")
            return self.views[node_id]
        return LocalSide(view=view, record=self.records.get, secret=secret,
                         pause=lambda n: act("pause", n), resume=lambda n: act("resume", n),
                         remove=lambda n: act("remove", n), node_dir=lambda n: self.root / n, adopt=adopt,
                         now=lambda: 1700.0)


class Fleet2:
    """Two computers, A (laptop) and B (nas), one store; A's asks answered by B's mover in-process."""

    def __init__(self, tmp: Path) -> None:
        self.shared = FakeShared()
        self.a, self.b = Side(tmp / "a"), Side(tmp / "b")
        self.ca, self.cb = computer("aaaaaaaa", "laptop"), computer("bbbbbbbb", "nas")
        self.asked: list[str] = []
        self.refuse: set[str] = set()
        self.unreachable = False
        self.mover_b = Mover(me=lambda: self.cb.id, computers=lambda: (self.ca,), local=self.b.local(),
                             store=FakeStore(self.shared), ask=self.ask)
        self.mover_a = Mover(me=lambda: self.ca.id, computers=lambda: (self.cb,), local=self.a.local(),
                             store=FakeStore(self.shared), ask=self.ask, serve_s=0.5, poll_s=0.01)

    async def ask(self, to: Computer, method: str, path: str, body: Any, timeout_s: float) -> tuple[int, Any]:
        self.asked.append(path)
        if self.unreachable:
            raise LinkDown(f"{to.name} ({to.id}) cannot be reached over the fleet link (OSError); the action is not known done there.")
        if path in self.refuse:
            return 409, {"error": {"code": "conflict", "message": "the keyring is locked"}}
        try:
            if path == "/fleet/run/move/check":
                self.mover_b.check_in(body)
                return 200, {"ok": True}
            if path == "/fleet/run/move/in":
                return 200, (await self.mover_b.move_in(self.ca, body)).to_json()
            if path == "/fleet/run/move/drop":
                return 200, {"dropped": await self.mover_b.drop(body)}
            if path.startswith("/api/nodes/"):
                return 200, self.b.views[path.rsplit("/", 1)[1]].to_json()
        except CadreError as exc:
            return 409, {"error": {"code": exc.code, "message": str(exc)}}
        return 404, {}


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet2:
    two = Fleet2(tmp_path)
    two.a.add("n1234abcd")
    return two


def test_a_move_takes_the_node_to_the_target_at_the_next_generation_and_removes_the_old_copy_after(fleet: Fleet2) -> None:
    done = asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))
    assert done["generation"] == 1 and done["to"] == {"id": "bbbbbbbb", "name": "nas"}
    assert fleet.shared.nodes["n1234abcd"].holder == "bbbbbbbb"
    assert fleet.a.calls == [("pause", "n1234abcd"), ("remove", "n1234abcd")]
    moved = fleet.b.records["n1234abcd"]
    assert (moved.name, moved.cadre, moved.cpu_percent) == ("Study", "family", 50)
    assert fleet.b.secrets["n1234abcd"] == "claim-secret-n1234abcd"
    folder = fleet.b.root / "n1234abcd"
    assert sorted(p.name for p in folder.iterdir()) == ["identity.json", "node-state.json"]  # never node.lock
    assert fleet.asked.index("/fleet/run/move/in") < fleet.asked.index("/api/nodes/n1234abcd")


def test_a_second_move_compares_the_holder_and_takes_generation_two(fleet: Fleet2) -> None:
    fleet.shared.nodes["n1234abcd"] = NodeShared("n1234abcd", holder="aaaaaaaa", generation=1)
    assert asyncio.run(fleet.mover_a.move("n1234abcd", "bbbbbbbb"))["generation"] == 2


@pytest.mark.parametrize("to,error,words", [("desk", NoSuchThing, "No computer 'desk'"),
                                            ("aaaaaaaa", Invalid, "on this computer already")])
def test_a_move_to_an_unknown_computer_is_refused_and_changes_nothing(fleet: Fleet2, to: str, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        asyncio.run(fleet.mover_a.move("n1234abcd", to))
    assert fleet.shared.takes == [] and fleet.a.calls == [] and fleet.asked == []


def test_a_name_two_computers_share_is_refused_for_its_id(fleet: Fleet2) -> None:
    fleet.mover_a._computers = lambda: (fleet.cb, replace(fleet.cb, id="cccccccc"))
    with pytest.raises(Invalid, match="Two computers are named 'nas'"):
        fleet.mover_a.target("nas")
    assert fleet.mover_a.target("cccccccc").id == "cccccccc"


def test_a_node_mid_start_is_refused_and_changes_nothing(fleet: Fleet2) -> None:
    fleet.a.views["n1234abcd"] = replace(fleet.a.views["n1234abcd"], ready=False, starting="starting for 2 s of a 15 s grace")
    with pytest.raises(InvalidState, match="is starting"):
        asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))
    assert fleet.shared.takes == [] and fleet.a.calls == []


def test_a_stopped_node_is_refused(fleet: Fleet2) -> None:
    fleet.a.views["n1234abcd"] = replace(fleet.a.views["n1234abcd"], running=False, ready=False, status=NodeStatus.ERROR)
    with pytest.raises(InvalidState, match="not running"):
        asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))


def test_an_unreachable_target_is_refused_before_the_take(fleet: Fleet2) -> None:
    fleet.unreachable = True
    with pytest.raises(InvalidState, match="cannot be reached.*Nothing was moved"):
        asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))
    assert fleet.shared.takes == [] and fleet.a.calls == []


def test_a_store_that_does_not_answer_refuses_the_move_and_changes_nothing(fleet: Fleet2) -> None:
    fleet.shared.down = True
    with pytest.raises(StoreUnavailable, match="not available"):
        asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))
    assert fleet.a.calls == [] and fleet.asked == []


def test_a_node_another_computer_holds_is_refused(fleet: Fleet2) -> None:
    fleet.shared.nodes["n1234abcd"] = NodeShared("n1234abcd", holder="cccccccc", generation=4)
    with pytest.raises(InvalidState, match="cccccccc holds"):
        asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))
    assert fleet.shared.takes == []


def test_a_target_that_refuses_the_node_gives_it_back_at_generation_two_and_it_runs_here_again(fleet: Fleet2) -> None:
    fleet.refuse.add("/fleet/run/move/in")
    with pytest.raises(InvalidState, match="was not moved to nas and runs here again: nas refused the node: the keyring is locked"):
        asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))
    assert fleet.shared.takes == [("n1234abcd", "bbbbbbbb", 1), ("n1234abcd", "aaaaaaaa", 2)]
    assert fleet.a.calls == [("pause", "n1234abcd"), ("resume", "n1234abcd")]
    assert "n1234abcd" in fleet.a.records and (fleet.a.root / "n1234abcd" / "identity.json").exists()


def test_a_copy_that_never_answers_with_the_same_peer_id_is_dropped_and_the_node_given_back(fleet: Fleet2) -> None:
    async def adopt_another(record: NodeRecord, secret: str, status: NodeStatus) -> NodeRecord:
        fleet.b.records[record.id] = record
        fleet.b.views[record.id] = make_view(record.id, record.name, status, peer_id="someone-else")
        return record
    fleet.mover_b.local = replace(fleet.mover_b.local, adopt=adopt_another)
    with pytest.raises(InvalidState, match="did not answer with the same peer id"):
        asyncio.run(fleet.mover_a.move("n1234abcd", "nas"))
    assert "n1234abcd" not in fleet.b.records  # dropped there
    assert fleet.shared.nodes["n1234abcd"].holder == "aaaaaaaa" and fleet.a.calls[-1] == ("resume", "n1234abcd")


def test_the_target_takes_no_node_the_store_does_not_say_it_holds(fleet: Fleet2) -> None:
    body = {"node": {"id": "n9", "name": "x", "status": "joined", "created_at": STAMP}, "secret": "s", "files": {},
            "generation": 1}
    with pytest.raises(InvalidState, match="does not say this computer holds"):
        asyncio.run(fleet.mover_b.move_in(fleet.ca, body))
    assert fleet.b.calls == [] and not (fleet.b.root / "n9").exists()


def test_the_portable_state_leaves_one_run_s_files_behind_and_refuses_a_folder(tmp_path: Path) -> None:
    (tmp_path / "identity.json").write_text("{}")
    for local in ("node.lock", "lease.json", "run.json", "x.tmp"):
        (tmp_path / local).write_text("1")
    assert list(read_bundle(tmp_path)) == ["identity.json"]
    (tmp_path / "cache").mkdir()
    with pytest.raises(InvalidState, match="not a file"):
        read_bundle(tmp_path)


def test_a_work_folder_over_the_bound_does_not_move(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * (MAX_BYTES + 1))
    with pytest.raises(InvalidState, match="cannot move"):
        read_bundle(tmp_path)


@pytest.mark.parametrize("files", [{"../evil": "eA=="}, {"node.lock": "eA=="}, {"a": "not base64!"}, ["a"],
                                   {"big": base64.b64encode(b"x" * (MAX_BYTES + 1)).decode()}])
def test_a_received_bundle_is_checked_again(files: Any) -> None:
    with pytest.raises(Invalid):
        check_bundle(files)


def test_a_bundle_is_written_only_into_an_empty_folder(tmp_path: Path) -> None:
    write_bundle(tmp_path / "n1", {"identity.json": b"{}"})
    assert (tmp_path / "n1" / "identity.json").stat().st_mode & 0o777 == 0o600
    with pytest.raises(InvalidState, match="exists here already"):
        write_bundle(tmp_path / "n1", {"identity.json": b"{}"})
