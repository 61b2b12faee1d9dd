"""A private bus that stands for the system D-Bus, and the system services the run conditions
read from it: a fake UPower (`OnBattery`), a fake NetworkManager (`Metered`) and a fake logind (its sleep
signal and delay locks, for the fleet), served with
dbus-fast's ServiceInterface, flipped by the test, each change sent as PropertiesChanged.

The bus is `dbus-daemon` with a system-like configuration written into the test's folder (type
system, EXTERNAL auth, one socket, a policy that lets the test's user own the services' names);
the code under test is given its address as `DBUS_SYSTEM_BUS_ADDRESS`, as a real system bus
would be found. The D-Bus signatures are set as the properties' annotations (what dbus-fast
reads), so the type checker never sees them as Python types; dbus-fast finds a property by
its function's name, hence the D-Bus names.
"""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus
from dbus_fast.constants import PropertyAccess
from dbus_fast.service import ServiceInterface, dbus_property

from tests.support.processes import end

CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
"""


@contextmanager
def private_system_bus(root: Path) -> Iterator[str]:
    """A system-like dbus-daemon of the test's own; yields its address, stopped at the end."""
    if shutil.which("dbus-daemon") is None:
        raise RuntimeError("dbus-daemon is missing; ./scripts/test installs it (dbus)")
    root.mkdir(parents=True, exist_ok=True)
    config = root / "system.conf"
    config.write_text(CONFIG.format(socket=root / "system_bus_socket"))
    proc = subprocess.Popen(["dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile", "--print-address=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        if not address:
            raise RuntimeError("dbus-daemon did not start with the system-like configuration")
        yield address
    finally:
        end(proc)


def OnBattery(self: FakeUPower) -> bool:
    return self.on_battery


def Metered(self: FakeNetworkManager) -> int:
    return self.metered


OnBattery.__annotations__ = {"return": "b"}
Metered.__annotations__ = {"return": "u"}


class FakeUPower(ServiceInterface):
    def __init__(self, on_battery: bool) -> None:
        super().__init__("org.freedesktop.UPower")
        self.on_battery = on_battery

    OnBattery = dbus_property(access=PropertyAccess.READ, name="OnBattery")(OnBattery)

    def flip(self, on_battery: bool) -> None:
        self.on_battery = on_battery
        self.emit_properties_changed({"OnBattery": on_battery})


class FakeNetworkManager(ServiceInterface):
    def __init__(self, metered: int) -> None:
        super().__init__("org.freedesktop.NetworkManager")
        self.metered = metered

    Metered = dbus_property(access=PropertyAccess.READ, name="Metered")(Metered)

    def flip(self, metered: int) -> None:
        self.metered = metered
        self.emit_properties_changed({"Metered": metered})


async def serve(address: str, name: str, path: str, service: Any) -> MessageBus:
    """`service` exported at `path` and `name` owned, on its own connection to the bus at `address`."""
    bus = await MessageBus(bus_address=address).connect()
    bus.export(path, service)
    await bus.request_name(name)
    return bus


async def serve_upower(address: str, on_battery: bool) -> tuple[MessageBus, FakeUPower]:
    upower = FakeUPower(on_battery)
    return await serve(address, "org.freedesktop.UPower", "/org/freedesktop/UPower", upower), upower


async def serve_network_manager(address: str, metered: int) -> tuple[MessageBus, FakeNetworkManager]:
    nm = FakeNetworkManager(metered)
    return await serve(address, "org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", nm), nm


class FakeLogind:
    """logind's Manager as the fleet's sleep watch uses it: `Inhibit` (each asked recorded, a pipe's
    write end handed over, its closing seen on the read end) and the `PrepareForSleep` signal."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self.inhibits: list[tuple[str, str, str, str]] = []
        self._ends: list[int] = []  # the read ends, one per lock handed over
        self._tasks: set[asyncio.Future] = set()
        bus.add_message_handler(self._on_message)

    def _on_message(self, msg: Message) -> bool | None:
        if msg.message_type != MessageType.METHOD_CALL or msg.interface != LOGIN1_MANAGER or msg.member != "Inhibit":
            return None
        self.inhibits.append((msg.body[0], msg.body[1], msg.body[2], msg.body[3]))
        task = asyncio.ensure_future(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _answer(self, msg: Message) -> None:
        read_end, write_end = os.pipe()
        self._ends.append(read_end)
        try:
            await self.bus.send(Message.new_method_return(msg, "h", [0], unix_fds=[write_end]))
        finally:
            os.close(write_end)  # sent: the caller's copy is the only one left, as logind's

    def held(self) -> list[bool]:
        """For each lock handed over: whether its caller still holds it (its descriptor open)."""
        return [_still_open(fd) for fd in self._ends]

    async def prepare_for_sleep(self, going: bool) -> None:
        await self.bus.send(Message.new_signal("/org/freedesktop/login1", LOGIN1_MANAGER, "PrepareForSleep", "b", [going]))

    def close(self) -> None:
        for fd in self._ends:
            os.close(fd)
        self._ends.clear()
        self.bus.disconnect()


def _still_open(read_end: int) -> bool:
    readable, _, _ = select.select([read_end], [], [], 0)
    if not readable:
        return True
    return os.read(read_end, 1) != b""  # EOF: every write end closed


LOGIN1_MANAGER = "org.freedesktop.login1.Manager"


async def serve_logind(address: str) -> FakeLogind:
    bus = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
    await bus.request_name("org.freedesktop.login1")
    return FakeLogind(bus)
