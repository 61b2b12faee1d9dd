"""The fleet's sleep watch on its own (a real logind on a bus is tests/integration/test_fleet_sleep_logs.py):
macOS and Windows watch nothing; no system bus, or no logind on it, is one log line and nothing more;
a slow announcement gives the lock back within its bound; unpaired, nothing is announced."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest
from dbus_fast import Message, MessageType

from cadre_desktop.host.fleet import sleepwatch
from cadre_desktop.host.fleet.sleepwatch import SleepWatch


class Said:
    def __init__(self, going_s: float = 0.0) -> None:
        self.going_s = going_s
        self.told: list[str] = []

    async def going(self) -> None:
        self.told.append("going")
        await asyncio.sleep(self.going_s)  # stands for peers that do not answer (bounded by the watch)

    async def woke(self) -> None:
        self.told.append("woke")


def never_connect_watch(platform: str, said: Said) -> tuple[SleepWatch, list[str]]:
    asked: list[str] = []

    async def connect():
        asked.append("connect")
        raise AssertionError("no bus is asked on this platform")

    return SleepWatch(going=said.going, woke=said.woke, paired=lambda: True, connect=connect, platform=platform), asked


@pytest.mark.parametrize("platform", ["darwin", "win32"])
async def test_macos_and_windows_watch_nothing_and_ask_no_bus(platform):
    watch, asked = never_connect_watch(platform, Said())
    await watch.start()
    assert not watch.watching and asked == [] and platform in (watch.why_not or "")
    await watch.stop()


async def test_no_system_bus_is_one_log_line_and_nothing_more(caplog):
    async def connect():
        raise FileNotFoundError("/run/dbus/system_bus_socket")

    watch = SleepWatch(going=Said().going, woke=Said().woke, paired=lambda: True, connect=connect, platform="linux")
    with caplog.at_level(logging.INFO, logger=sleepwatch.__name__):
        await watch.start()
    assert not watch.watching and not watch.holds_lock
    assert [r.getMessage() for r in caplog.records] == [
        "fleet: no system bus (/run/dbus/system_bus_socket): the other computers are not told when this one sleeps"]
    await watch.stop()


class Bus:
    """Just enough of a dbus-fast bus: each call answered by `answers` (an error for a name not there)."""

    def __init__(self, logind: bool = True) -> None:
        self.logind = logind
        self.calls: list[str] = []
        self.connected = True
        self.handlers: list = []
        self.pipes: list[int] = []

    async def call(self, msg: Message) -> Message:
        self.calls.append(msg.member or "")
        if msg.member == "GetNameOwner" and not self.logind:
            return Message(message_type=MessageType.ERROR, reply_serial=1, error_name="org.freedesktop.DBus.Error.NameHasNoOwner",
                           signature="s", body=["no logind"])
        if msg.member == "Inhibit":
            read_end, write_end = os.pipe()
            self.pipes.append(read_end)
            return Message(message_type=MessageType.METHOD_RETURN, reply_serial=1, signature="h", body=[0],
                           unix_fds=[write_end])
        if msg.member == "GetNameOwner":
            return Message(message_type=MessageType.METHOD_RETURN, reply_serial=1, signature="s", body=[":1.9"])
        return Message(message_type=MessageType.METHOD_RETURN, reply_serial=1)

    def add_message_handler(self, handler) -> None:
        self.handlers.append(handler)

    def remove_message_handler(self, handler) -> None:
        self.handlers.remove(handler)

    def disconnect(self) -> None:
        self.connected = False
        for fd in self.pipes:
            os.close(fd)

    def signal(self, going: bool) -> None:
        msg = Message(message_type=MessageType.SIGNAL, path=sleepwatch.LOGIN1_PATH, interface=sleepwatch.MANAGER,
                      member="PrepareForSleep", signature="b", body=[going], sender=":1.9")
        for handler in list(self.handlers):
            handler(msg)


def watch_on(bus: Bus, said: Said, paired=lambda: True, announce_s: float = 1.5) -> SleepWatch:
    async def connect():
        return bus

    return SleepWatch(going=said.going, woke=said.woke, paired=paired, connect=connect, platform="linux",
                      announce_s=announce_s)


async def test_no_logind_on_the_bus_is_one_log_line_and_the_bus_let_go(caplog):
    bus = Bus(logind=False)
    watch = watch_on(bus, Said())
    with caplog.at_level(logging.INFO, logger=sleepwatch.__name__):
        await watch.start()
    assert not watch.watching and not bus.connected and "Inhibit" not in bus.calls
    assert len(caplog.records) == 1 and "logind is not on the system bus" in caplog.records[0].getMessage()


async def until(predicate, what: str) -> None:
    async with asyncio.timeout(10):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_a_slow_announcement_gives_the_lock_back_within_its_bound():
    bus, said = Bus(), Said(going_s=60.0)
    watch = watch_on(bus, said, announce_s=0.2)
    await watch.start()
    assert watch.holds_lock and bus.calls.count("Inhibit") == 1
    bus.signal(True)
    await until(lambda: not watch.holds_lock, "the lock given back")
    assert said.told == ["going"]
    bus.signal(False)
    await until(lambda: said.told == ["going", "woke"], "the wake told")
    assert watch.holds_lock and bus.calls.count("Inhibit") == 2
    await watch.stop()
    assert not watch.holds_lock and not bus.connected


async def test_unpaired_no_lock_is_held_and_nothing_is_announced():
    bus, said = Bus(), Said()
    paired = [False]
    watch = watch_on(bus, said, paired=lambda: paired[0])
    await watch.start()
    assert watch.watching and not watch.holds_lock
    bus.signal(True)
    bus.signal(False)
    await asyncio.gather(*watch._tasks)
    assert said.told == [] and "Inhibit" not in bus.calls
    paired[0] = True  # paired later: the lock from then on
    await watch.paired_now()
    assert watch.holds_lock
    watch.unpaired()  # the last computer unpaired: given back
    assert not watch.holds_lock and bus.calls.count("Inhibit") == 1
    await watch.stop()


async def test_a_signal_of_another_interface_or_not_a_boolean_is_ignored():
    bus, said = Bus(), Said()
    watch = watch_on(bus, said)
    await watch.start()
    for msg in (Message(message_type=MessageType.SIGNAL, path=sleepwatch.LOGIN1_PATH, interface="org.example.Other",
                        member="PrepareForSleep", signature="b", body=[True]),
                Message(message_type=MessageType.SIGNAL, path=sleepwatch.LOGIN1_PATH, interface=sleepwatch.MANAGER,
                        member="PrepareForSleep", signature="s", body=["yes"])):
        watch._on_message(msg)
    assert not watch._tasks and said.told == [] and watch.holds_lock
    await watch.stop()


async def test_the_fleet_says_it_goes_to_sleep_in_its_hello_and_checks_every_peer_at_the_wake(tmp_path, monkeypatch):
    from cadre_desktop.host.core.clock import Clock
    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.host.fleet.computers import FleetFile
    from cadre_desktop.host.fleet.fleet import Fleet
    from cadre_desktop.settings import Settings
    from tests.support.fake_host import FakeHost
    from tests.support.keyrings import MemoryKeyring

    fleet = Fleet(file=FleetFile(tmp_path / "fleet.json"), settings=Settings, secrets=SecretStore(MemoryKeyring()),
                  clock=Clock(), host=FakeHost(tmp_path), advertise_host=lambda: "127.0.0.1")
    fleet.load()
    checked: list[str] = []

    async def check_all() -> None:
        checked.append("all")

    monkeypatch.setattr(fleet.reach, "check_all", check_all)
    assert fleet.hello()["going_to_sleep"] is False
    await fleet.announce_sleep()  # no computer online: nobody asked, but its hello says so from now on
    assert fleet.hello()["going_to_sleep"] is True
    await fleet.woke()
    assert fleet.hello()["going_to_sleep"] is False and checked == ["all"]
