"""A node's caps at the edges: `PATCH /api/nodes/{id}`, `node set`, `node show`, the views, and
the supervisor's words for an exit the memory cap caused."""

from __future__ import annotations

import aiohttp
import pytest

from cadre_desktop.cli import commands as cli
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.host.edges.control import ControlServer
from cadre_desktop.host.host import Host
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings
from tests.support.fake_host import FakeHost, make_view
from tests.support.polling import async_wait_until
from tests.support.served_host import ServedHost


@pytest.fixture
async def api(tmp_path):
    host = FakeHost(tmp_path)
    host.put(make_view("n1", "one", NodeStatus.JOINED))
    server = ControlServer(host, tmp_path / "control.json")
    await server.start()
    async with aiohttp.ClientSession() as session:
        async def call(method: str, path: str, body=None):
            headers = {"Authorization": f"Bearer {server.token}"}
            async with session.request(method, server.url + path, headers=headers, json=body) as resp:
                return resp.status, await resp.json(content_type=None)
        yield host, call
    await server.stop()


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.setenv("CADRE_DESKTOP_HOME", str(tmp_path))
    served = ServedHost(tmp_path)
    served.put(make_view("n1", "one", NodeStatus.JOINED))
    yield served
    served.close()


# -- PATCH /api/nodes/{id} ----------------------------------------------------------------------

async def test_patch_sets_a_nodes_caps_and_answers_its_view(api):
    host, call = api
    status, body = await call("PATCH", "/api/nodes/n1", {"cpu_percent": 50, "memory_mb": 256, "always_run": True})
    assert status == 200, body
    assert body["caps"]["cpu_percent"] == 50 and body["caps"]["memory_mb"] == 256
    assert host.calls[-1] == ("caps", "n1", {"cpu_percent": 50, "memory_mb": 256, "always_run": True})


@pytest.mark.parametrize("body, words", [
    ({"memory_mb": 16}, "memory_mb"), ({"cpu_percent": 0}, "cpu_percent"), ({"cpu_percent": 10**6}, "cpu_percent"),
    ({"always_run": "no"}, "always_run"), ({"colour": "red"}, "colour"), ({}, "Nothing to change"),
    ({"cpu_percent": 50, "memory_mb": 1}, "memory_mb"),
])
async def test_patch_with_a_bad_value_is_one_400_and_changes_nothing(api, body, words):
    host, call = api
    status, answer = await call("PATCH", "/api/nodes/n1", body)
    assert status == 400 and answer["error"]["code"] == "bad_request"
    assert words in answer["error"]["message"]
    assert not [c for c in host.calls if c[0] == "caps"]  # the host was never asked
    assert host.get_node("n1").caps is None


async def test_patch_of_an_unknown_node_is_404(api):
    _host, call = api
    status, answer = await call("PATCH", "/api/nodes/nope", {"memory_mb": 64})
    assert status == 404 and answer["error"]["code"] == "not_found"


# -- node set ------------------------------------------------------------------------------------

def run(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_node_set_sends_the_change_and_says_it_is_taken_at_the_next_start(served, capsys):
    code, out, _err = run(capsys, "node", "set", "n1", "--cpu", "50", "--memory", "256", "--always-run")
    assert code == 0
    assert served.host.calls[-1] == ("caps", "n1", {"cpu_percent": 50, "memory_mb": 256, "always_run": True})
    assert "cpu 50 % of a core, memory 256 MB" in out
    assert "next start" in out and "cadre-desktop node restart n1" in out


def test_node_set_default_gives_back_the_hosts_cap(served, capsys):
    code, _out, _err = run(capsys, "node", "set", "n1", "--memory", "default", "--no-always-run")
    assert code == 0
    assert served.host.calls[-1] == ("caps", "n1", {"memory_mb": None, "always_run": False})


@pytest.mark.parametrize("argv, code, words", [
    (["--memory", "16"], 1, "memory_mb must be a whole number of MB from 32"),
    (["--cpu", "0"], 1, "cpu_percent must be a whole number from 1"),
    (["--cpu", "lots"], 2, "not a whole number"),
    ([], 2, "give --cpu, --memory, --always-run"),
])
def test_node_set_with_bad_input_fails_clearly_and_changes_nothing(served, capsys, argv, code, words):
    got, _out, err = run(capsys, "node", "set", "n1", *argv)
    assert got == code
    assert words in err
    assert served.host.get_node("n1").caps is None


def test_node_show_says_the_caps_in_words(served, capsys):
    caps = {"cpu_percent": 20, "memory_mb": None, "low_priority": True, "enforced": False,
            "how": "priority only: memory and cpu caps not enforced here: macOS"}
    served.put(make_view("n2", "two", NodeStatus.JOINED, caps=caps))
    code, out, _err = run(capsys, "node", "show", "n2")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("caps:"))
    assert "cpu 20 % of a core, memory not capped, low priority (NOT ENFORCED: priority only" in line
    code, out, _err = run(capsys, "node", "show", "n2", "--json")
    assert '"how": "priority only: memory and cpu caps not enforced here: macOS"' in out


# -- the host: its record, its views -------------------------------------------------------------

async def test_a_hosts_views_carry_caps_and_set_node_caps_writes_the_record(tmp_path):
    from cadre_desktop.host.core.records.records import NodeRecord
    from cadre_desktop.host.core.vault.secrets import SecretStore
    from tests.support.fake_driver import FakeOrchestrator
    from tests.support.keyrings import MemoryKeyring

    home = tmp_path / "home"
    host = Host(Paths(home, home, home / "logs"), Settings(node_memory_mb=512, node_cpu_percent=80),
                secrets=SecretStore(MemoryKeyring()), serve_control_api=False)
    host.store.put(NodeRecord(id="n1", name="one", status=NodeStatus.ERROR))
    views_of = host._make_supervision  # the parts over a fake driver, no process started
    fake = FakeOrchestrator()
    parts = views_of(fake)
    host._parts = parts
    assert parts.views.get("n1").caps == {"cpu_percent": 80, "memory_mb": 512, "low_priority": True,
                                          "enforced": False, "how": "not enforced: a fake driver"}
    fake.unheld["n1"] = "its group could not be made"  # issue 39, item 3: the view asks for this node
    unheld = parts.views.get("n1").caps
    assert unheld is not None and unheld["enforced"] is False
    assert unheld["how"] == "not enforced for this node: its group could not be made"
    fake.unheld.clear()
    view = await host.set_node_caps("n1", {"memory_mb": 64, "always_run": True})
    assert view.caps is not None and view.caps["memory_mb"] == 64 and view.caps["cpu_percent"] == 80
    record = host.store.get("n1")
    assert record is not None and (record.memory_mb, record.always_run, record.cpu_percent) == (64, True, None)
    assert host._caps_for("n1").memory_mb == 64
    from cadre_desktop.errors import Invalid, NoSuchThing

    with pytest.raises(Invalid):
        await host.set_node_caps("n1", {"memory_mb": 8})
    assert host.store.get("n1").memory_mb == 64  # type: ignore[union-attr]
    with pytest.raises(NoSuchThing):
        await host.set_node_caps("gone", {"memory_mb": 64})


async def test_an_exit_the_memory_cap_caused_is_in_words_and_counts_as_a_crash(rig):
    rig.node("a", live=True, attempts=0)
    rig.sup.start()
    handle = rig.present_rec("a").handle
    rig.orch.say("a", "allocating more")
    rig.orch.exit(handle, code=-9, cause="stopped by its memory cap of 256 MB")
    await async_wait_until(lambda: len(rig.orch.spawns_of("a")) == 1, what="the respawn after the kill")
    record = rig.present_rec("a")
    assert record.attempts == 1  # a crash: it spent an attempt
    assert record.start is not None and record.start.last_exit == "stopped by its memory cap of 256 MB"
