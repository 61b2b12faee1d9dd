"""Another computer's node's log on the control API (`fleet_control.forwarded`) and for the window
(`Fleet.log_tail`): what that computer answers is bounded and made printable here too."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from cadre_desktop.errors import NoSuchThing
from cadre_desktop.host.edges import fleet_control
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.wire.httpmsg import Request

NAS = Computer("pc_nas234567890", "nas", "127.0.0.1:9", "sha256:00", "x", "2026-12-07T01:00:00+00:00")
HOSTILE = [f"line {i}" for i in range(3000)] + [7, "\x1b]0;pwned\x07" + "z" * 50_000]


class FleetThere:
    """A fleet whose paired computer hosts `n-remote1` and answers its log with `answer`."""

    def __init__(self, answer) -> None:
        self.doc = SimpleNamespace(computers=(NAS,))
        self.answer = answer
        self.asked: list[tuple[str, str]] = []

    async def host_of(self, node_id: str):
        return NAS if node_id == "n-remote1" else None

    async def forward(self, computer, method, path, body):
        self.asked.append((method, path))
        return self.answer


class HostHere:
    def __init__(self, fleet) -> None:
        self.fleet = fleet

    def get_node(self, node_id: str):
        raise NoSuchThing(f"There is no node {node_id!r} on this host.")


def here(fleet) -> Any:
    """This computer's host as `forwarded` sees it (it hosts no such node)."""
    return HostHere(fleet)


async def no_body() -> bytes:
    return b""


async def test_a_forwarded_log_is_bounded_and_printable_and_names_its_computer():
    fleet = FleetThere((200, {"lines": HOSTILE, "extra": "dropped"}))
    answer = await fleet_control.forwarded(here(fleet), Request("GET", "/api/nodes/n-remote1/logs", "", {}, "127.0.0.1", no_body))
    assert answer is not None and answer.status == 200
    doc = json.loads(answer.body)
    assert set(doc) == {"lines", "computer"} and doc["computer"] == {"id": NAS.id, "name": "nas"}
    assert len(doc["lines"]) <= 200 and doc["lines"][-2] == "line 2999"
    assert all(line.isprintable() and len(line) <= 2000 for line in doc["lines"])
    assert fleet.asked == [("GET", "/api/nodes/n-remote1/logs")]


async def test_a_forwarded_log_that_is_not_a_list_is_no_lines_and_a_refusal_is_passed_on():
    fleet = FleetThere((200, {"lines": "not a list"}))
    request = Request("GET", "/api/nodes/n-remote1/logs", "", {}, "127.0.0.1", no_body)
    answer = await fleet_control.forwarded(here(fleet), request)
    assert answer is not None and json.loads(answer.body)["lines"] == []
    fleet.answer = (404, {"error": {"code": "not_found", "message": "There is no node 'n-remote1' on this host."}})
    answer = await fleet_control.forwarded(here(fleet), request)
    assert answer is not None and answer.status == 404 and json.loads(answer.body)["error"]["code"] == "not_found"


async def test_the_fleets_log_tail_for_the_window_is_bounded_and_a_refusal_is_said_in_that_computers_words(tmp_path, monkeypatch):
    import pytest

    from cadre_desktop.errors import InvalidState
    from cadre_desktop.host.core.clock import Clock
    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.host.fleet.computers import FleetFile
    from cadre_desktop.host.fleet.fleet import Fleet
    from cadre_desktop.settings import Settings
    from tests.support.fake_host import FakeHost
    from tests.support.keyrings import MemoryKeyring

    fleet = Fleet(file=FleetFile(tmp_path / "fleet.json"), settings=Settings, secrets=SecretStore(MemoryKeyring()),
                  clock=Clock(), host=FakeHost(tmp_path), advertise_host=lambda: "127.0.0.1")
    there = FleetThere((200, {"lines": HOSTILE}))
    monkeypatch.setattr(fleet, "host_of", there.host_of)
    monkeypatch.setattr(fleet, "forward", there.forward)
    lines = await fleet.log_tail("n-remote1", 50)
    assert len(lines) == 49 and lines[-1].startswith("\\x1b]0;pwned\\x07") and len(lines[-1]) == 2000  # 7 dropped
    there.answer = (409, {"error": {"message": "busy\x1b[2J"}})
    with pytest.raises(InvalidState, match="^nas: busy"):
        await fleet.log_tail("n-remote1")
    there.answer = (500, ["not", "an", "object"])
    with pytest.raises(InvalidState, match="^nas: answered 500$"):
        await fleet.log_tail("n-remote1")
    with pytest.raises(NoSuchThing):
        await fleet.log_tail("n-nobody12345")
