"""The other computers are told before this one sleeps, and it looks at them again when it wakes.

On Linux, logind says it on the system bus: `org.freedesktop.login1.Manager`'s `PrepareForSleep(true)`
just before a suspend or hibernation, `PrepareForSleep(false)` after the wake. A *delay* inhibitor
lock (`Inhibit("sleep", "cadre-desktop", "tell the fleet", "delay")`, a file descriptor) held while
paired makes logind wait for us (at most its `InhibitDelayMaxSec`, 5 s by default): at
`PrepareForSleep(true)` the fleet announces it (`going`, bounded by `ANNOUNCE_S`), then the lock's
descriptor is closed and the machine sleeps. At the wake a new lock is taken and the fleet checks
its peers at once (`woke`). Only while paired: unpaired, no lock is held and no announcement made.

No system bus, no logind, a refused lock: quietly nothing (one log line), the fleet works as before
(its peers see this computer unreachable, not asleep). macOS and Windows: not watched here (a
guarded no-op: their sleep notices are the tray's to add, through the same `going` and `woke`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dbus_fast import Message
    from dbus_fast.aio import MessageBus

log = logging.getLogger(__name__)

LOGIN1 = "org.freedesktop.login1"
LOGIN1_PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"
DBUS = "org.freedesktop.DBus"
#: How long the announcement may hold the sleep up (logind's own cap is `InhibitDelayMaxSec`).
ANNOUNCE_S = 1.5
#: How long one D-Bus call (connect, match, Inhibit) may take.
CALL_S = 5.0

Connect = Callable[[], Awaitable["MessageBus"]]


async def system_bus() -> MessageBus:
    """The system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket), able to take a descriptor."""
    from dbus_fast import BusType
    from dbus_fast.aio import MessageBus

    return await MessageBus(bus_type=BusType.SYSTEM, negotiate_unix_fd=True).connect()


class SleepWatch:
    """Follows logind's sleep signals for the fleet (`start`/`stop` by the fleet's owner)."""

    def __init__(self, *, going: Callable[[], Awaitable[None]], woke: Callable[[], Awaitable[None]],
                 paired: Callable[[], bool], connect: Connect = system_bus, platform: str = sys.platform,
                 announce_s: float = ANNOUNCE_S) -> None:
        self._going = going
        self._woke = woke
        self._paired = paired
        self._connect = connect
        self.platform = platform
        self.announce_s = announce_s
        self._bus: MessageBus | None = None
        self._lock_fd: int | None = None
        self._taking = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Why nothing is watched (None while watching, or before `start`): for the log and doctor.
        self.why_not: str | None = None

    @property
    def watching(self) -> bool:
        return self._bus is not None

    @property
    def holds_lock(self) -> bool:
        return self._lock_fd is not None

    async def start(self) -> None:
        """Watch (on Linux); never raises: no bus or no logind is one log line and nothing more."""
        if self._bus is not None:
            return
        if not self.platform.startswith("linux"):
            self.why_not = f"sleep is not watched on {self.platform}"
            log.debug("fleet: %s", self.why_not)
            return
        try:
            async with asyncio.timeout(CALL_S):
                bus = await self._connect()
        except Exception as exc:  # no system bus here, or it refused us
            self.why_not = f"no system bus ({_why(exc)})"
            log.info("fleet: %s: the other computers are not told when this one sleeps", self.why_not)
            return
        try:
            await _call(bus, DBUS, "/org/freedesktop/DBus", DBUS, "AddMatch", "s",
                        [f"type='signal',sender='{LOGIN1}',path='{LOGIN1_PATH}',interface='{MANAGER}',member='PrepareForSleep'"])
            await _call(bus, DBUS, "/org/freedesktop/DBus", DBUS, "GetNameOwner", "s", [LOGIN1])
        except Exception as exc:  # no logind (a container, another init), or a policy that refuses the rule
            bus.disconnect()
            self.why_not = f"logind is not on the system bus ({_why(exc)})"
            log.info("fleet: %s: the other computers are not told when this one sleeps", self.why_not)
            return
        self._bus, self.why_not = bus, None
        bus.add_message_handler(self._on_message)
        if self._paired():
            await self._take_lock()
        log.info("fleet: sleep is watched (logind); the other computers are told before this one sleeps")

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._release()
        bus, self._bus = self._bus, None
        if bus is not None:
            bus.remove_message_handler(self._on_message)
            bus.disconnect()

    async def paired_now(self) -> None:
        """The computer was just paired: hold the lock from now on (watching already)."""
        if self._bus is not None and self._lock_fd is None:
            await self._take_lock()

    def unpaired(self) -> None:
        """The last computer was unpaired: the lock is given back (taken again at the next pairing)."""
        self._release()

    async def _take_lock(self) -> None:
        async with self._taking:  # a pairing and the start (or a wake) at once take one lock, not two
            if self._lock_fd is None:
                await self._take_lock_once()

    async def _take_lock_once(self) -> None:
        bus = self._bus
        if bus is None:
            return
        try:
            reply = await _call_message(bus, LOGIN1, LOGIN1_PATH, MANAGER, "Inhibit", "ssss",
                                        ["sleep", "cadre-desktop", "tell the fleet", "delay"])
            fds = list(reply.unix_fds)
            index = reply.body[0] if reply.body else None
            fd = fds[index] if isinstance(index, int) and 0 <= index < len(fds) else None
            for other in fds:
                if other != fd:
                    os.close(other)
            if fd is None:
                raise OSError("Inhibit answered no descriptor")
        except Exception as exc:  # refused by policy, or logind without inhibitors: announced unheld
            log.warning("fleet: no sleep delay lock (%s); the announcement may not beat the sleep", _why(exc))
            return
        self._release()
        self._lock_fd = fd

    def _release(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:  # already closed: released all the same
                pass

    def _on_message(self, msg: Message) -> None:
        from dbus_fast import MessageType

        if (msg.message_type != MessageType.SIGNAL or msg.member != "PrepareForSleep" or msg.interface != MANAGER
                or msg.path != LOGIN1_PATH or not msg.body or not isinstance(msg.body[0], bool)):
            return
        self._spawn(self._before_sleep() if msg.body[0] else self._after_wake())

    async def _before_sleep(self) -> None:
        try:
            if self._paired():
                async with asyncio.timeout(self.announce_s):
                    await self._going()
                log.info("fleet: going to sleep; the other computers were told")
        except Exception as exc:  # a slow or failed announcement never holds the sleep up longer
            log.warning("fleet: going to sleep; not every computer was told (%s)", _why(exc))
        finally:
            self._release()

    async def _after_wake(self) -> None:
        try:
            if self._paired():
                await self._take_lock()
                await self._woke()
        except Exception as exc:  # the fleet's check at the wake failed: its periodic one follows
            log.warning("fleet: after the wake: %s", _why(exc))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _call_message(bus: MessageBus, destination: str, path: str, interface: str, member: str,
                        signature: str, body: list[object]) -> Message:
    from dbus_fast import Message, MessageType

    async with asyncio.timeout(CALL_S):
        reply = await bus.call(Message(destination=destination, path=path, interface=interface, member=member,
                                       signature=signature, body=body))
    if reply is None:
        raise OSError(f"{member}: no reply")
    if reply.message_type == MessageType.ERROR:
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        raise OSError(f"{reply.error_name}: {text}".rstrip(": "))
    return reply


async def _call(bus: MessageBus, destination: str, path: str, interface: str, member: str,
                signature: str, body: list[object]) -> list[object]:
    return list((await _call_message(bus, destination, path, interface, member, signature, body)).body)


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return (str(exc) or type(exc).__name__).replace("\n", " ")[:200]
