"""A systemd user manager on a private D-Bus session: `StartTransientUnit` and `StopUnit` of
`org.freedesktop.systemd1.Manager`, recorded (the caps' scopes, host/local/limits/scope.py).

Served with dbus-fast; the D-Bus signatures are set as the methods' annotations (as
dbus-fast reads them), so the type checker never sees them as Python types.
"""

from __future__ import annotations

from typing import Any

from dbus_fast import DBusError, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method


def _start(self: FakeManager, name: str, mode: str, props: list[Any], aux: list[Any]) -> str:
    if self.refuse:
        raise DBusError("org.freedesktop.DBus.Error.AccessDenied", "not allowed")
    self.started.append((name, mode, {key: value.value for key, value in props}))
    return f"/org/freedesktop/systemd1/job/{len(self.started)}"


def _stop(self: FakeManager, name: str, mode: str) -> str:
    if name not in [s[0] for s in self.started]:
        raise DBusError("org.freedesktop.systemd1.NoSuchUnit", f"Unit {name} not loaded.")
    self.stopped.append(name)
    return "/org/freedesktop/systemd1/job/0"


_start.__annotations__ = {"name": "s", "mode": "s", "props": "a(sv)", "aux": "a(sa(sv))", "return": "o"}
_stop.__annotations__ = {"name": "s", "mode": "s", "return": "o"}


class FakeManager(ServiceInterface):
    def __init__(self) -> None:
        super().__init__("org.freedesktop.systemd1.Manager")
        self.started: list[tuple[str, str, dict[str, Any]]] = []
        self.stopped: list[str] = []
        self.refuse = False

    StartTransientUnit = method(name="StartTransientUnit")(_start)
    StopUnit = method(name="StopUnit")(_stop)


async def serve_manager(address: str) -> tuple[MessageBus, FakeManager]:
    """The fake manager, named org.freedesktop.systemd1 on the bus at `address`."""
    bus = await MessageBus(bus_address=address).connect()
    manager = FakeManager()
    bus.export("/org/freedesktop/systemd1", manager)
    await bus.request_name("org.freedesktop.systemd1")
    return bus, manager


__all__ = ["FakeManager", "Variant", "serve_manager"]
