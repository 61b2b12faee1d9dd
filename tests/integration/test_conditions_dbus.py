"""The run conditions' D-Bus sources against real D-Bus services: a fake UPower and a fake
NetworkManager served on a private bus given to the code as the system bus
(`DBUS_SYSTEM_BUS_ADDRESS`), read, followed, gone and back."""

from __future__ import annotations

import pytest

from cadre_desktop.host.conditions import battery, metered
from cadre_desktop.host.conditions.source import Reading
from tests.support.polling import async_wait_until
from tests.support.system_bus import private_system_bus, serve_network_manager, serve_upower


@pytest.fixture
def system_bus(tmp_path, monkeypatch):
    with private_system_bus(tmp_path / "bus") as address:
        monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", address)
        yield address


async def test_on_battery_is_read_from_upower_and_followed_when_it_changes(system_bus):
    bus, upower = await serve_upower(system_bus, on_battery=True)
    source = battery.battery_source("linux")
    heard: list[Reading] = []
    try:
        await source.start(heard.append)
        assert source.reading() == Reading(True, "UPower over the system D-Bus", "on battery")
        upower.flip(False)
        await async_wait_until(lambda: heard and heard[-1].value is False, what="OnBattery false heard")
        assert source.reading() == Reading(False, "UPower over the system D-Bus", "on mains power")
        upower.flip(True)
        await async_wait_until(lambda: heard[-1].value is True, what="OnBattery true heard again")
        assert [r.value for r in heard] == [True, False, True]
    finally:
        await source.stop()
        bus.disconnect()


async def test_no_upower_reads_unknown_and_one_that_appears_later_is_picked_up(system_bus):
    source = battery.battery_source("linux", retry_s=0.2)
    heard: list[Reading] = []
    bus = None
    try:
        await source.start(heard.append)
        first = source.reading()
        assert first.value is None and first.source == "UPower over the system D-Bus"
        assert "org.freedesktop.UPower is not on the bus" in first.detail
        bus, upower = await serve_upower(system_bus, on_battery=True)
        await async_wait_until(lambda: source.reading().value is True, what="UPower picked up")
        assert heard[-1] == Reading(True, "UPower over the system D-Bus", "on battery")
        upower.flip(False)
        await async_wait_until(lambda: source.reading().value is False, what="the change after a late start")
        bus.disconnect()
        await async_wait_until(lambda: source.reading().value is None, what="UPower gone: unknown")
        assert "left the bus" in source.reading().detail or "not on the bus" in source.reading().detail
    finally:
        await source.stop()
        if bus is not None:
            bus.disconnect()


async def test_no_system_bus_reads_unknown_and_a_bus_that_starts_later_is_picked_up_on_the_retry(tmp_path, monkeypatch):
    root = tmp_path / "late"
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", f"unix:path={root}/system_bus_socket")
    source = battery.battery_source("linux", retry_s=0.1)
    heard: list[Reading] = []
    await source.start(heard.append)  # no bus at all: no raise
    try:
        assert source.reading().value is None
        assert source.reading().detail.startswith("cannot reach the bus: FileNotFoundError")
        with private_system_bus(root) as address:
            bus, _upower = await serve_upower(address, on_battery=False)
            try:
                await async_wait_until(lambda: source.reading().value is False, what="the retry finds the bus")
                assert heard[-1] == Reading(False, "UPower over the system D-Bus", "on mains power")
            finally:
                bus.disconnect()
        await async_wait_until(lambda: source.reading().value is None, what="the bus gone: unknown")
    finally:
        await source.stop()


async def test_metered_is_read_from_network_manager_and_followed_when_it_changes(system_bus):
    bus, nm = await serve_network_manager(system_bus, metered=1)
    source = metered.metered_source("linux")
    heard: list[Reading] = []
    try:
        await source.start(heard.append)
        assert source.reading() == Reading(True, "NetworkManager over the system D-Bus", "metered")
        nm.flip(4)
        await async_wait_until(lambda: heard and heard[-1].value is False, what="Metered guess-no heard")
        assert source.reading().detail == "not metered (NetworkManager's guess)"
        nm.flip(0)
        await async_wait_until(lambda: heard[-1].value is None, what="Metered unknown heard")
        assert [r.value for r in heard] == [True, False, None]
    finally:
        await source.stop()
        bus.disconnect()


async def test_no_network_manager_reads_unknown_and_one_that_appears_later_is_picked_up(system_bus):
    source = metered.metered_source("linux", retry_s=0.2)
    heard: list[Reading] = []
    bus = None
    try:
        await source.start(heard.append)
        assert source.reading().value is None
        assert "org.freedesktop.NetworkManager is not on the bus" in source.reading().detail
        bus, nm = await serve_network_manager(system_bus, metered=3)
        await async_wait_until(lambda: source.reading().value is True, what="NetworkManager picked up")
        assert heard[-1] == Reading(True, "NetworkManager over the system D-Bus", "metered (NetworkManager's guess)")
    finally:
        await source.stop()
        if bus is not None:
            bus.disconnect()
