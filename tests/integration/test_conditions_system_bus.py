"""The run conditions end to end, every part real: a Host (the local driver, the reference node)
whose condition sources are this platform's own (`make_sources`), reading a fake UPower and a
fake NetworkManager served on a private bus given as `DBUS_SYSTEM_BUS_ADDRESS`. On battery the
node is held (`held_by: conditions`, "on battery"), its child gone; back on mains it runs again,
no attempt spent; a metered network the same."""

from __future__ import annotations

import pytest

from cadre_desktop.host.conditions import judge
from cadre_desktop.host.core.vault.secrets import SecretStore
from cadre_desktop.host.host import Host
from cadre_desktop.paths import Paths
from cadre_desktop.settings import parse_settings
from tests.support.headless import fast_settings
from tests.support.keyrings import MemoryKeyring
from tests.support.polling import async_wait_until
from tests.support.system_bus import private_system_bus, serve_network_manager, serve_upower

NM_METERED_YES, NM_METERED_NO = 1, 2


@pytest.fixture
async def desk(tmp_path, monkeypatch):
    """The system bus with UPower (on mains) and NetworkManager (not metered), and a Host reading them."""
    monkeypatch.setattr(judge, "DEBOUNCE_S", 0.0)  # flapping is the unit tests'; here each change is taken
    with private_system_bus(tmp_path / "bus") as address:
        monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", address)
        upower_bus, upower = await serve_upower(address, False)
        nm_bus, nm = await serve_network_manager(address, NM_METERED_NO)
        home = tmp_path / "home"
        settings = parse_settings({**fast_settings(), "pause_on_battery": True, "pause_on_metered_network": True,
                                   "pause_when_in_use": False}, "test")
        host = Host(Paths(home, home, home / "logs"), settings, secrets=SecretStore(MemoryKeyring()),
                    serve_control_api=False)
        await host.start()
        try:
            yield host, upower, nm
        finally:
            await host.stop(stop_nodes=True)
            upower_bus.disconnect()
            nm_bus.disconnect()


def up(host: Host, node_id: str) -> bool:
    view = host.get_node(node_id)
    return view.running and view.held_by is None


async def test_on_battery_the_node_is_held_and_back_on_mains_it_runs(desk):
    host, upower, _ = desk
    report = {c["name"]: c for c in host.conditions_report()["conditions"]}
    assert report["on_battery"]["source"] == "UPower over the system D-Bus", report
    node = await host.add_node("kitchen")
    await async_wait_until(lambda: up(host, node.id), timeout=30, what="the node up")
    pid = host.get_node(node.id).pid
    upower.flip(True)
    await async_wait_until(lambda: not host.get_node(node.id).running, timeout=30, what="the node held on battery")
    held = host.get_node(node.id)
    assert held.held_by == "conditions" and held.hold_reason == "on battery" and held.attempts == 0
    upower.flip(False)
    await async_wait_until(lambda: up(host, node.id), timeout=30, what="the node back on mains power")
    back = host.get_node(node.id)
    assert back.pid != pid and back.attempts == 0


async def test_on_a_metered_network_the_node_is_held_and_released(desk):
    host, _, nm = desk
    node = await host.add_node("attic")
    await async_wait_until(lambda: up(host, node.id), timeout=30, what="the node up")
    nm.flip(NM_METERED_YES)
    await async_wait_until(lambda: not host.get_node(node.id).running, timeout=30, what="the node held, metered")
    assert host.get_node(node.id).hold_reason == "on a metered network"
    nm.flip(NM_METERED_NO)
    await async_wait_until(lambda: up(host, node.id), timeout=30, what="the node back, not metered")
