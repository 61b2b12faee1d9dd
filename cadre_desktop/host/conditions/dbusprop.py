"""A condition source that follows one D-Bus property of one service (UPower's `OnBattery`,
NetworkManager's `Metered`) with dbus-fast, on the loop's own connection.

How it watches: one connection to the bus (the system bus by default; dbus-fast honours
`DBUS_SYSTEM_BUS_ADDRESS`), two match rules (the service's `PropertiesChanged` on its object,
and `NameOwnerChanged` of its name), then `GetNameOwner` and `Properties.Get`. A change signal
updates the reading at once, and only when it comes from the name's current owner; the service
leaving the bus reads unknown at once, and coming back is read at once. Everything that fails
(no bus, no such service, a call that does not answer within `call_timeout_s`) reads unknown
with why in words and is tried again after `retry_s` (or sooner, when the name gets an owner),
so a service that starts answering later is picked up. Nothing here raises out of `start`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cadre_desktop.host.conditions.polled import FIRST_READ_S, Changes, first_read, why
from cadre_desktop.host.conditions.source import Reading
from cadre_desktop.host.core.clock import Clock, sleep_or_kick

if TYPE_CHECKING:
    from dbus_fast import Message
    from dbus_fast.aio import MessageBus

log = logging.getLogger(__name__)

DBUS = "org.freedesktop.DBus"
PROPERTIES = "org.freedesktop.DBus.Properties"
#: How long one D-Bus call (connect, match, read) may take.
CALL_TIMEOUT_S = 5.0

Connect = Callable[[], Awaitable["MessageBus"]]


@dataclass(frozen=True)
class Property:
    """Where a property lives: the service's well-known name, its object, interface and name."""

    service: str
    path: str
    interface: str
    name: str


async def system_bus() -> MessageBus:
    """The system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket)."""
    from dbus_fast import BusType
    from dbus_fast.aio import MessageBus

    return await MessageBus(bus_type=BusType.SYSTEM).connect()


async def session_bus() -> MessageBus:
    """The person's session bus (`DBUS_SESSION_BUS_ADDRESS`)."""
    from dbus_fast import BusType
    from dbus_fast.aio import MessageBus

    return await MessageBus(bus_type=BusType.SESSION).connect()


async def call(bus: MessageBus, destination: str, path: str, interface: str, member: str,
               signature: str = "", body: list[object] | None = None, timeout_s: float = CALL_TIMEOUT_S) -> list[object]:
    """One method call, bounded; an error reply raises OSError with its name and message. Its answer's
    body is as dbus-fast gives it, of the types the member's signature says (a variant's `.value`)."""
    from dbus_fast import Message, MessageType

    async with asyncio.timeout(timeout_s):
        reply = await bus.call(Message(destination=destination, path=path, interface=interface, member=member,
                                       signature=signature, body=body or []))
    if reply is None:
        raise OSError(f"{member}: no reply")
    if reply.message_type == MessageType.ERROR:
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        raise OSError(f"{reply.error_name}: {text}".rstrip(": "))
    return list(reply.body)


class PropertyWatch:
    """A ConditionSource over one D-Bus property; `read` turns its value into a Reading
    (`source` is where it comes from, in words, e.g. "UPower over the system D-Bus")."""

    def __init__(self, name: str, prop: Property, read: Callable[[object], Reading], source: str, *,
                 connect: Connect = system_bus, retry_s: float = 60.0, call_timeout_s: float = CALL_TIMEOUT_S,
                 clock: Clock | None = None) -> None:
        self.name = name
        self.prop = prop
        self.source = source
        self._read = read
        self._connect = connect
        self.retry_s = retry_s
        self._timeout_s = call_timeout_s
        self._clock = clock or Clock()
        self._changes = Changes(name, Reading(None, source, "not read yet"))
        self._bus: MessageBus | None = None
        self._owner: str | None = None
        self._kick = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self.first_read_s = FIRST_READ_S
        #: Both match rules in place: a change is heard, so a known value need not be read again.
        self._followed = False

    def reading(self) -> Reading:
        return self._changes.last

    async def start(self, on_change: Callable[[Reading], None]) -> None:
        """The first reading is asked at once and waited for up to `polled.FIRST_READ_S`."""
        self._changes.on_change = on_change
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run(), name=f"condition-{self.name}")
            await first_read(self._changes, self.first_read_s)

    def poke(self) -> None:
        """Read again now (e.g. after a wake from sleep), whatever the signals said."""
        self._kick.set()

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        tasks = [t for t in (runner, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._changes.on_change = None
        self._drop_bus()

    async def _run(self) -> None:
        await self._attempt()
        while True:
            # Known and followed: nothing to do until a signal says the service left, or the bus dropped.
            known = self._changes.last.value is not None and self._followed
            wait = 24 * 3600.0 if known else self.retry_s
            await sleep_or_kick(self._clock, wait, self._kick)
            await self._attempt()

    async def _attempt(self) -> None:
        if self._bus is None:
            try:
                async with asyncio.timeout(self._timeout_s):
                    bus = await self._connect()
            except Exception as exc:  # no bus here (yet), or it refused us
                detail = "no answer" if isinstance(exc, TimeoutError) else why(exc)
                self._changes.set(Reading(None, self.source, f"cannot reach the bus: {detail}"))
                return
            self._bus = bus
            self._followed = await self._follow(bus)
        try:
            reading = await self._fetch(self._bus)
        except Exception as exc:  # no service, a refusal, the library's own errors: unknown
            if self._bus is not None and not self._bus.connected:
                self._drop_bus()
            reading = Reading(None, self.source, self._unreachable(exc))
        self._changes.set(reading)

    def _unreachable(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"{self.prop.service} did not answer within {self._timeout_s:g} s"
        text = why(exc)
        if "NameHasNoOwner" in text or "ServiceUnknown" in text:
            return f"{self.prop.service} is not on the bus"
        return f"cannot read {self.prop.name}: {text}"

    async def _follow(self, bus: MessageBus) -> bool:
        """Hear the property's changes and its service's comings and goings (the rules are in place
        before the first read, so no change falls between them); notice a dropped bus. False when a
        rule was refused: then the value is read again every `retry_s` instead."""
        bus.add_message_handler(self._on_message)
        self._spawn(self._on_disconnect(bus))
        followed = True
        for rule in (
            f"type='signal',sender='{self.prop.service}',path='{self.prop.path}',interface='{PROPERTIES}',"
            f"member='PropertiesChanged',arg0='{self.prop.interface}'",
            f"type='signal',sender='{DBUS}',interface='{DBUS}',member='NameOwnerChanged',arg0='{self.prop.service}'",
        ):
            followed = await self._add_match(bus, rule) and followed
        return followed

    async def _add_match(self, bus: MessageBus, rule: str) -> bool:
        try:
            await call(bus, DBUS, "/org/freedesktop/DBus", DBUS, "AddMatch", "s", [rule], self._timeout_s)
        except Exception as exc:  # a refused rule (a bus policy): the value is read every retry instead
            log.warning("condition %s: cannot follow its changes (%s); read again every %g s", self.name, why(exc),
                        self.retry_s)
            return False
        return True

    async def _on_disconnect(self, bus: MessageBus) -> None:
        try:
            await bus.wait_for_disconnect()  # type: ignore[no-untyped-call]
        except Exception as exc:  # the connection ended with an error: it ended all the same
            log.debug("condition %s: the bus dropped: %s", self.name, why(exc))
        if bus is self._bus:
            self._drop_bus()
            self._changes.set(Reading(None, self.source, "the bus connection dropped"))
            self._kick.set()

    async def _fetch(self, bus: MessageBus) -> Reading:
        from dbus_fast import Variant

        # Signals that arrive before the owner is known are not trusted; the Get below reads them anyway.
        owner = await call(bus, DBUS, "/org/freedesktop/DBus", DBUS, "GetNameOwner", "s", [self.prop.service],
                           self._timeout_s)
        self._owner = str(owner[0])
        body = await call(bus, self.prop.service, self.prop.path, PROPERTIES, "Get", "ss",
                          [self.prop.interface, self.prop.name], self._timeout_s)
        value = body[0]
        if not isinstance(value, Variant):  # Get's reply is one variant (its signature is "v")
            raise OSError(f"Get answered {type(value).__name__}, not a variant")
        return self._read(value.value)

    def _on_message(self, msg: Message) -> None:
        from dbus_fast import MessageType

        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "NameOwnerChanged" and msg.sender == DBUS and msg.body[:1] == [self.prop.service]:
            new_owner = msg.body[2]
            self._owner = None
            if not new_owner:
                self._changes.set(Reading(None, self.source, f"{self.prop.service} left the bus"))
            self._kick.set()
            return
        if (msg.member != "PropertiesChanged" or msg.interface != PROPERTIES or msg.path != self.prop.path
                or msg.sender is None or msg.sender != self._owner or msg.body[:1] != [self.prop.interface]):
            return
        changed, invalidated = msg.body[1], msg.body[2]
        if self.prop.name in changed:
            try:
                self._changes.set(self._read(changed[self.prop.name].value))
            except Exception as exc:  # a value of the wrong type from the bus
                self._changes.set(Reading(None, self.source, f"cannot read {self.prop.name}: {why(exc)}"))
        elif self.prop.name in invalidated:
            self._kick.set()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _drop_bus(self) -> None:
        bus, self._bus = self._bus, None
        self._owner = None
        if bus is not None:
            bus.remove_message_handler(self._on_message)
            if bus.connected:
                bus.disconnect()
