"""The run conditions' battery and metered sources, each platform branch over a fake OS seam;
the polled source's retry and change rules on the fake clock."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from cadre_desktop.host.conditions import battery, idle, metered, platform
from cadre_desktop.host.conditions.dbusprop import PropertyWatch
from cadre_desktop.host.conditions.polled import PolledSource, Unreadable, Worker
from cadre_desktop.host.conditions.source import Reading
from cadre_desktop.settings import Settings
from tests.support.clock import FakeClock, settle
from tests.support.polling import async_wait_until


@dataclass
class Battery:
    power_plugged: bool | None
    percent: float = 80.0


class FakePower:
    def __init__(self, *answers):
        self.answers = list(answers)

    def battery(self):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_upower_on_battery_reads_true_and_mains_false():
    assert battery.upower_reading(True) == Reading(True, "UPower over the system D-Bus", "on battery")
    assert battery.upower_reading(False) == Reading(False, "UPower over the system D-Bus", "on mains power")
    with pytest.raises(TypeError):
        battery.upower_reading(1)


def test_psutil_plugged_unplugged_no_battery_and_unsaid():
    assert battery.psutil_reading(Battery(False, 42.4)) == Reading(True, battery.PSUTIL_SOURCE, "on battery (42 %)")
    assert battery.psutil_reading(Battery(True)).value is False
    assert battery.psutil_reading(None) == Reading(False, battery.PSUTIL_SOURCE, "no battery")
    unsaid = battery.psutil_reading(Battery(None))
    assert unsaid.value is None and "does not say" in unsaid.detail


@pytest.mark.parametrize("platform", ["win32", "darwin"])
async def test_windows_and_macos_poll_psutil_and_tell_a_change(platform):
    clock = FakeClock()
    power = FakePower(Battery(True), Battery(False))
    source = battery.battery_source(platform, power=power, clock=clock)
    assert isinstance(source, PolledSource)
    heard: list[Reading] = []
    await source.start(heard.append)
    await settle()
    try:
        assert source.reading().value is False and heard == [source.reading()]
        await clock.run_for(battery.POLL_S - 1)
        assert len(heard) == 1
        await clock.run_for(1)
        await async_wait_until(lambda: len(heard) == 2, what="the second poll")
        assert heard[-1] == Reading(True, battery.PSUTIL_SOURCE, "on battery (80 %)")
    finally:
        await source.stop()


def test_linux_follows_upower_on_the_system_bus():
    source = battery.battery_source("linux")
    assert isinstance(source, PropertyWatch)
    assert (source.prop.service, source.prop.path, source.prop.name) == (
        "org.freedesktop.UPower", "/org/freedesktop/UPower", "OnBattery")
    assert source.reading() == Reading(None, "UPower over the system D-Bus", "not read yet")


async def test_a_probe_that_raises_reads_unknown_is_retried_and_picked_up_when_it_answers():
    clock = FakeClock()
    power = FakePower(OSError("no power supply class"), OSError("still none"), Battery(False))
    source = battery.polled_battery(power, interval_s=30, retry_s=60, clock=clock)
    heard: list[Reading] = []
    await source.start(heard.append)  # never raises
    await settle()
    try:
        assert source.reading().value is None and "OSError: no power supply class" in source.reading().detail
        await clock.run_for(30)
        assert len(power.answers) == 2, "unknown waits retry_s, not interval_s"
        await clock.run_for(30)
        await async_wait_until(lambda: len(power.answers) == 1, what="the retry")
        assert source.reading().detail == "OSError: still none" and heard == [], "unknown to unknown is no change"
        await clock.run_for(60)
        await async_wait_until(lambda: heard, what="picked up")
        assert heard == [Reading(True, battery.PSUTIL_SOURCE, "on battery (80 %)")]
    finally:
        await source.stop()


async def test_a_new_detail_with_the_same_value_is_kept_but_not_told():
    answers = iter([Reading(True, "x", "idle 1 s"), Reading(True, "x", "idle 11 s"), Reading(False, "x", "idle 5 min")])

    async def probe():
        return next(answers)

    source = PolledSource("in_use", probe, Reading(None, "x"), interval_s=10)
    heard: list[Reading] = []
    source._changes.on_change = heard.append
    for _ in range(3):
        await source.poll_once()
    assert [r.detail for r in heard] == ["idle 1 s", "idle 5 min"]
    assert source.reading().detail == "idle 5 min"


async def test_a_listener_that_raises_does_not_end_the_source(caplog):
    async def probe():
        return Reading(True, "x")

    def broken(_reading):
        raise RuntimeError("listener bug")

    source = PolledSource("on_battery", probe, Reading(None, "x"), interval_s=10)
    await source.start(broken)
    try:
        assert source.reading().value is True and "a listener failed" in caplog.text
    finally:
        await source.stop()


@pytest.mark.parametrize("value, known, words", [
    (0, None, "NetworkManager does not know"), (1, True, "metered"), (2, False, "not metered"),
    (3, True, "metered (NetworkManager's guess)"), (4, False, "not metered (NetworkManager's guess)"),
    (9, None, "an unknown Metered value 9"),
])
def test_network_manager_metered_values(value, known, words):
    assert metered.nm_reading(value) == Reading(known, "NetworkManager over the system D-Bus", words)


@pytest.mark.parametrize("cost, known", [
    (metered.COST_UNRESTRICTED, False), (metered.COST_FIXED, True), (metered.COST_VARIABLE, True),
    (metered.COST_UNRESTRICTED | metered.COST_ROAMING, True), (metered.COST_UNRESTRICTED | metered.COST_OVERDATALIMIT, True),
    (metered.COST_UNRESTRICTED | metered.COST_CONGESTED, False), (0, None), (None, None), (0x100, None),
])
def test_windows_connection_cost_flags(cost, known):
    assert metered.cost_reading(cost).value is known


class FakeCost:
    def __init__(self, cost):
        self.value = cost
        self.calls = 0

    def cost(self):
        self.calls += 1
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


async def test_windows_reads_the_cost_through_its_seam_and_a_com_failure_is_unknown():
    reader = FakeCost(metered.COST_VARIABLE)
    source = metered.metered_source("win32", reader=reader)
    heard: list[Reading] = []
    await source.start(heard.append)
    try:
        assert heard == [Reading(True, metered.WINDOWS_SOURCE, "metered")] and reader.calls == 1
        reader.value = OSError("CoCreateInstance(NetworkListManager) failed: 0x80040154")
        assert isinstance(source, PolledSource)
        reading = await source.poll_once()
        assert reading.value is None and "0x80040154" in reading.detail
    finally:
        await source.stop()


async def test_macos_metered_is_unknown_and_says_why():
    source = metered.metered_source("darwin")
    assert isinstance(source, Unreadable)
    await source.start(lambda _r: None)
    assert source.reading().value is None and "Network.framework" in source.reading().detail
    await source.stop()


def test_linux_follows_network_manager_on_the_system_bus():
    source = metered.metered_source("linux")
    assert isinstance(source, PropertyWatch) and source.prop.service == "org.freedesktop.NetworkManager"
    assert source.prop.name == "Metered" and source.source == "NetworkManager over the system D-Bus"


def test_make_sources_by_default_builds_on_battery_and_metered_only():
    sources = platform.make_sources(Settings(), "linux", env={})
    assert [s.name for s in sources] == ["on_battery", "metered"]
    assert all(isinstance(s, PropertyWatch) for s in sources)


def test_make_sources_builds_only_the_conditions_that_are_on():
    on = SimpleNamespace(pause_on_battery=False, pause_when_in_use=True, in_use_idle_minutes=5,
                         pause_on_metered_network=False)
    sources = platform.make_sources(on, "linux", env={"DISPLAY": ":0"})
    assert [s.name for s in sources] == ["in_use"]
    assert isinstance(sources[0], PolledSource)
    probe = sources[0]._probe
    assert isinstance(probe, idle.IdleProbe) and probe.threshold_ms == 300_000
    off = SimpleNamespace(pause_on_battery=False, pause_when_in_use=False, pause_on_metered_network=False)
    assert platform.make_sources(off, "linux") == []


def test_a_missing_or_wrong_idle_threshold_is_three_minutes():
    assert platform.idle_minutes(SimpleNamespace()) == 3.0
    assert platform.idle_minutes(SimpleNamespace(in_use_idle_minutes=0)) == 3.0
    assert platform.idle_minutes(SimpleNamespace(in_use_idle_minutes=True)) == 3.0
    assert platform.idle_minutes(SimpleNamespace(in_use_idle_minutes=10)) == 10.0


@pytest.mark.parametrize("name, kinds", [("win32", [PolledSource, PolledSource, PolledSource]),
                                         ("darwin", [PolledSource, PolledSource, Unreadable])])
def test_make_sources_on_windows_and_macos(name, kinds):
    every = SimpleNamespace(pause_on_battery=True, pause_when_in_use=True, pause_on_metered_network=True)
    sources = platform.make_sources(every, name, env={})
    assert [s.name for s in sources] == ["on_battery", "in_use", "metered"]
    assert [type(s) for s in sources] == kinds


async def test_describe_lists_each_reading_as_plain_data():
    sources = platform.make_sources(SimpleNamespace(pause_on_battery=False), "darwin", env={})
    assert platform.describe(sources) == [{
        "condition": "metered", "value": None, "seen": "unknown", "source": "macOS",
        "detail": "not read on macOS: its expensive/constrained path needs Network.framework"}]
    power = battery.polled_battery(FakePower(Battery(False)))
    await power.start(lambda _r: None)
    try:
        assert platform.describe([power])[0]["seen"] == "yes"
        assert set(platform.CONDITIONS) == set(platform.HOLD_WORDS) == {"on_battery", "in_use", "metered"}
    finally:
        await power.stop()


async def test_a_hung_os_call_holds_neither_the_loop_nor_start_and_is_not_asked_twice():
    release = threading.Event()
    calls = []

    def hung():
        calls.append(1)
        release.wait(10)
        return Battery(True)

    class Hung:
        def battery(self):
            return hung()

    source = battery.polled_battery(Hung(), interval_s=0.01, retry_s=0.01)
    source._timeout_s = 0.05
    source.first_read_s = 0.02
    heard: list[Reading] = []
    started = time.monotonic()
    await source.start(heard.append)
    try:
        assert time.monotonic() - started < 1, "start waits for its first reading only briefly"
        assert source.reading().detail == "not read yet"
        await async_wait_until(lambda: "no answer within" in source.reading().detail, what="the timeout")
        await async_wait_until(lambda: "has not returned yet" in source.reading().detail, what="no second call")
        assert len(calls) == 1
        release.set()
        await async_wait_until(lambda: source.reading().value is False, what="the answer once it returns")
        assert heard[-1].value is False and len(calls) >= 2
    finally:
        release.set()
        await source.stop()


async def test_a_worker_hands_back_the_calls_error():
    worker = Worker("t")

    def broken():
        raise PermissionError("no access to the power supply")

    with pytest.raises(PermissionError):
        await worker.run(broken)
    assert not worker.busy and await worker.run(lambda: 7) == 7


async def test_every_source_may_be_stopped_without_a_start():
    every = SimpleNamespace(pause_on_battery=True, pause_when_in_use=True, pause_on_metered_network=True)
    for name in ("linux", "win32", "darwin"):
        for source in platform.make_sources(every, name, env={}):
            await source.stop()
            assert source.reading().value is None


async def test_poke_asks_again_before_the_interval():
    clock = FakeClock()
    power = FakePower(Battery(True), Battery(False))
    source = battery.polled_battery(power, interval_s=30, clock=clock)
    heard: list[Reading] = []
    await source.start(heard.append)
    await settle()
    try:
        source.poke()
        await async_wait_until(lambda: len(heard) == 2, what="the poked read")
        assert heard[-1].value is True
    finally:
        await source.stop()
