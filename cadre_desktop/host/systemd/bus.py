"""The one connection to a systemd user manager: its calls, bounded, and its unit signals.

The manager lives on the person's session bus (`org.freedesktop.systemd1`). One
connection (dbus-fast, with file descriptor passing: a node's stdin is handed over as
one) carries every call, each bounded by `CALL_TIMEOUT_S`, and one match rule: every
unit's `PropertiesChanged`, which is how a unit's end is heard (never polled). The
manager sends them in order, its service's properties before its unit's, so a listener
that sees `ActiveState` leave `active` already holds the service's `ExecMainStatus`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cadre_desktop.errors import MachineError

if TYPE_CHECKING:
    from dbus_fast import Message
    from dbus_fast.aio import MessageBus

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 10.0
SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT = "org.freedesktop.systemd1.Unit"
SERVICE = "org.freedesktop.systemd1.Service"
PROPERTIES = "org.freedesktop.DBus.Properties"
UNIT_PATHS = "/org/freedesktop/systemd1/unit"
MATCH = (f"type='signal',sender='{SYSTEMD}',interface='{PROPERTIES}',member='PropertiesChanged',"
         f"path_namespace='{UNIT_PATHS}'")

#: (object path, interface, changed properties as plain values)
Change = tuple[str, str, dict[str, Any]]


class BusError(MachineError, OSError):
    """A call the manager refused or did not answer; `name` is the D-Bus error's name. An OSError
    too, so what catches the OS's failures of a start catches the manager's."""

    code = "systemd_bus"

    def __init__(self, member: str, name: str, words: str) -> None:
        super().__init__(f"systemd {member}: {name}: {words}"[:300])
        self.name = name


def unit_path(unit: str) -> str:
    """The manager's object path of a unit (sd-bus's escaping: every byte but [A-Za-z0-9] as _xx)."""
    escaped = "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):02x}" for c in unit)
    return f"{UNIT_PATHS}/{escaped}"


class UserBus:
    """Calls on the user manager and its units' changes, over one connection."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._bus: MessageBus | None = None
        self._listeners: list[Callable[[Change], None]] = []
        #: Told when the connection is lost without `disconnect` (the manager or its bus went away).
        self.on_lost: Callable[[], None] | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self._bus is not None and self._bus.connected

    async def connect(self) -> None:
        """Connect, ask for every unit's changes and subscribe to the manager (idempotent)."""
        if self.connected:
            return
        from dbus_fast.aio import MessageBus

        async with asyncio.timeout(CALL_TIMEOUT_S):
            bus = await MessageBus(bus_address=self.address, negotiate_unix_fd=True).connect()
        bus.add_message_handler(self._on_message)
        self._bus = bus
        try:
            await self._call_on("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                "AddMatch", "s", [MATCH])
            await self.call("Subscribe", "", [])
        except BaseException:
            self.disconnect()
            raise
        self._watch = asyncio.get_running_loop().create_task(self._watch_lost(bus))

    async def _watch_lost(self, bus: MessageBus) -> None:
        try:
            await bus.wait_for_disconnect()  # type: ignore[no-untyped-call]
        except Exception as exc:  # the connection's own error is the news
            log.debug("the user manager's bus: %s", exc)
        if self._bus is bus:  # not our own disconnect
            self._bus = None
            log.error("lost the connection to the systemd user manager (%s)", self.address)
            if self.on_lost is not None:
                self.on_lost()

    def disconnect(self) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            bus.disconnect()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def listen(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    def _on_message(self, msg: Message) -> None:
        path = msg.path or ""
        if msg.member != "PropertiesChanged" or not path.startswith(UNIT_PATHS):
            return
        try:
            interface, changed = str(msg.body[0]), {str(k): v.value for k, v in msg.body[1].items()}
        except (IndexError, AttributeError, TypeError):
            return
        for listener in list(self._listeners):
            try:
                listener((path, interface, changed))
            except Exception:  # one broken listener must not lose the change for the others
                log.exception("a unit change listener failed")

    async def call(self, member: str, signature: str, body: list[object], fds: Sequence[int] = ()) -> list[Any]:
        """A call on the manager; its reply's body. BusError when refused, TimeoutError when mute."""
        return await self._call_on(SYSTEMD, MANAGER_PATH, MANAGER, member, signature, body, fds)

    async def properties(self, path: str, interface: str) -> dict[str, Any]:
        """Every property of one interface of one unit, as plain values."""
        body = await self._call_on(SYSTEMD, path, PROPERTIES, "GetAll", "s", [interface])
        return {k: v.value for k, v in body[0].items()}

    async def _call_on(self, destination: str, path: str, interface: str, member: str, signature: str,
                       body: list[object], fds: Sequence[int] = ()) -> list[Any]:
        from dbus_fast import Message, MessageType

        bus = self._bus
        if bus is None or not bus.connected:
            raise BusError(member, "disconnected", "the user manager's bus is not connected")
        message = Message(destination=destination, path=path, interface=interface, member=member,
                          signature=signature, body=body, unix_fds=list(fds))
        async with asyncio.timeout(CALL_TIMEOUT_S):
            reply = await bus.call(message)
        if reply is None:
            raise BusError(member, "no-reply", "no answer")
        if reply.message_type == MessageType.ERROR:
            words = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
            raise BusError(member, reply.error_name or "error", words)
        return list(reply.body)
