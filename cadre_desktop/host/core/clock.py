"""Time as a seam: the engine asks a Clock, tests hand it a fake that jumps."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from cadre_desktop.times import parse_time


class Clock:
    """Wall time for what must survive a restart (attempt timestamps), monotonic for waits."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def sleep_or_kick(clock: Clock, seconds: float, kick: asyncio.Event) -> bool:
    """Sleep on `clock`, or end early when `kick` is set; True when kicked (and clears it)."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    kicked = asyncio.ensure_future(kick.wait())
    try:
        await asyncio.wait({sleeper, kicked}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        kicked.cancel()
    was_kicked = kick.is_set()
    kick.clear()
    return was_kicked


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stamp(clock: Clock) -> str:
    """The clock's now as records and files write a time (`iso`)."""
    return iso(clock.now())


def parse_iso(text: object) -> datetime | None:
    """Parse a timestamp we wrote (without a zone: UTC); anything unparsable, or outside the
    calendar's window (`times.parse_time`), is None (callers decide what that means)."""
    return parse_time(text, zone="utc")
