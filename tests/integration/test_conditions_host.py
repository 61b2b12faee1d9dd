"""The run conditions wired into a real Host (the local driver, the reference node) with fake
sources given in its constructor: on battery the node sleeps with `held_by: conditions` and
`hold_reason` "on battery", its child gone; back on mains it runs again; metered the same; a
node with `always_run` runs through it; the report says each condition."""

from __future__ import annotations

import pytest

from cadre_desktop.host.conditions import judge
from cadre_desktop.host.core.vault.secrets import SecretStore
from cadre_desktop.host.host import Host
from cadre_desktop.paths import Paths
from cadre_desktop.settings import parse_settings
from tests.support.fake_conditions import FakeSource
from tests.support.headless import fast_settings
from tests.support.keyrings import MemoryKeyring
from tests.support.polling import async_wait_until


@pytest.fixture
async def host(tmp_path, monkeypatch):
    monkeypatch.setattr(judge, "DEBOUNCE_S", 0.0)  # flapping is the unit tests'; here each change is taken
    home = tmp_path / "home"
    sources = [FakeSource("on_battery", False, "a fake UPower"), FakeSource("metered", False, "a fake NM")]
    h = Host(Paths(home, home, home / "logs"), parse_settings(fast_settings(), "test"),
             secrets=SecretStore(MemoryKeyring()), serve_control_api=False, condition_sources=sources)
    await h.start()
    yield h, {s.name: s for s in sources}
    await h.stop(stop_nodes=True)


def up(host: Host, node_id: str) -> bool:
    view = host.get_node(node_id)
    return view.running and view.status == "unclaimed" and view.held_by is None


@pytest.mark.parametrize(("name", "words"), [("on_battery", "on battery"), ("metered", "on a metered network")])
async def test_a_condition_holds_the_node_and_its_end_brings_it_back(host, name, words):
    host, sources = host
    node = await host.add_node("one")
    always = await host.add_node("two")
    await host.set_node_caps(always.id, {"always_run": True})
    await async_wait_until(lambda: up(host, node.id) and up(host, always.id), timeout=20, what="both nodes up")
    pid = host.get_node(node.id).pid
    sources[name].set(True)
    await async_wait_until(lambda: not host.get_node(node.id).running, timeout=20, what="the node held")
    held = host.get_node(node.id)
    assert held.status == "paused" and held.held_by == "conditions" and held.hold_reason == words
    assert up(host, always.id)  # always_run: the conditions pass it over
    row = next(c for c in host.conditions_report()["conditions"] if c["name"] == name)
    assert row["does"] == "holds the nodes" and row["source"].startswith("a fake")
    sources[name].set(False)
    await async_wait_until(lambda: up(host, node.id), timeout=20, what="the node back")
    back = host.get_node(node.id)
    assert back.pid != pid and back.attempts == 0


async def test_turning_a_condition_off_in_the_settings_releases_the_nodes_it_held(host):
    host, sources = host
    node = await host.add_node("one")
    await async_wait_until(lambda: up(host, node.id), timeout=20, what="the node up")
    sources["on_battery"].set(True)
    await async_wait_until(lambda: host.get_node(node.id).held_by == "conditions", timeout=20, what="held")
    await host.apply_settings(host.settings.with_changes(pause_on_battery=False))
    await async_wait_until(lambda: up(host, node.id), timeout=20, what="released by the new settings")
    row = next(c for c in host.conditions_report()["conditions"] if c["name"] == "on_battery")
    assert row["does"] == "nothing (pause_on_battery is off)" and row["value"] is True
