"""One fake clock for both time seams: the engine's and the node's.

The engine's seam (cadre_desktop.host.core.clock.Clock) asks for `now()` (an aware
datetime), `monotonic()` and `await sleep(s)`; the node's (cadre_desktop.node.clock.Clock)
for `wall()` (epoch seconds) and `monotonic()`. FakeClock answers all of them from
two numbers that move only when a test says so.

Moving time is synchronous: `advance(s)` moves both clocks and wakes every sleeper
that is due, but a woken task runs only when the test next yields to the loop. An
async test that wants the woken tasks to have run says `await clock.run_for(s)`
(advance, then `settle()`); a sync test (the node's) just calls `advance(s)`.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from cadre_desktop.host.core.clock import Clock

START = datetime(2026, 1, 1, tzinfo=UTC)


async def settle(rounds: int = 10) -> None:
    """Let tasks that are ready run until they wait again (on the fake clock or on I/O)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeClock(Clock):
    """Wall and monotonic time moved by hand; sleepers wake when the clock passes their time."""

    def __init__(self, start: datetime | None = None, monotonic: float = 1000.0) -> None:
        self._now = start or START
        self._mono = monotonic
        self._sleepers: list[tuple[float, asyncio.Future]] = []

    # the engine's seam
    def now(self) -> datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._mono + seconds, fut))
        await fut

    # the node's seam
    def wall(self) -> float:
        return self._now.timestamp()

    # both
    def monotonic(self) -> float:
        return self._mono

    # test controls
    def advance(self, seconds: float) -> None:
        """Move both clocks forward and wake every sleeper that is due (it runs at the next yield)."""
        self._now += timedelta(seconds=seconds)
        self._mono += seconds
        due = [f for t, f in self._sleepers if t <= self._mono]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self._mono]
        for fut in due:
            if not fut.done():
                fut.set_result(None)

    async def run_for(self, seconds: float) -> None:
        """`advance`, then let the tasks it woke run up to their next wait."""
        self.advance(seconds)
        await settle(20)

    def jump_wall(self, seconds: float) -> None:
        """Move the wall clock only (a suspend, or the user setting the time); monotonic stays."""
        self._now += timedelta(seconds=seconds)
