"""A condition source that asks the platform now and then (psutil's battery, Windows' connection
cost, the person's idle time): one probe at a time, in the background, never on the loop's time.

The probe is a coroutine: one that calls a platform function which can block runs it on a
thread (`Worker`). A probe that raises reads unknown, with why in words, and the source keeps
asking (every `retry_s` while unknown, every `interval_s` while it answers), so a source that
starts answering later is picked up. `on_change` is called when the value or where it comes
from changes; a detail alone (an idle time growing) only updates `reading()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from cadre_desktop.host.conditions.source import Reading
from cadre_desktop.host.core.clock import Clock, sleep_or_kick
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

T = TypeVar("T")

Probe = Callable[[], Awaitable[Reading]]

#: How long one probe may take before it reads unknown (a hung platform call stays in its thread).
PROBE_TIMEOUT_S = 10.0
#: How long `start` waits for the first reading before it returns (the reading then comes later).
FIRST_READ_S = 2.0


class Worker:
    """One platform call at a time, each on a daemon thread of its own: the loop never waits on the
    OS, a call that hangs for good holds only its thread (never the host's exit, as a pool's thread
    would), and no second call is started while it hangs (the probe reads unknown instead)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.busy = False

    async def run(self, call: Callable[[], T]) -> T:
        if self.busy:
            raise OSError("its last call to the OS has not returned yet")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def work() -> None:
            try:
                result = call()
            except BaseException as exc:  # handed to the loop as the call's outcome
                self._hand(loop, future, None, exc)
            else:
                self._hand(loop, future, result, None)

        self.busy = True
        threading.Thread(target=work, name=f"condition-{self.name}", daemon=True).start()
        return await future

    def _hand(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[T], result: T | None,
              exc: BaseException | None) -> None:
        """The call's outcome to the loop (from the worker thread); not busy from then on."""

        def settle() -> None:
            self.busy = False
            if future.done():  # the probe timed out, or the source stopped
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(cast(T, result))

        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop has closed: nobody waits any more
            self.busy = False


def why(exc: BaseException) -> str:
    """An error from the platform in words: one line, bounded (its text is the OS's, not ours)."""
    text = one_line(str(exc), 160)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Changes:
    """The last reading and who hears a change: what every source shares. Each change is logged
    once (so an error a source turned into an unknown reading is in the log too, not every poll)."""

    def __init__(self, name: str, unknown: Reading) -> None:
        self.name = name
        self.last = unknown
        self.on_change: Callable[[Reading], None] | None = None
        self.read = asyncio.Event()

    def set(self, reading: Reading) -> None:
        self.read.set()
        before, self.last = self.last, reading
        if (before.value, before.source) == (reading.value, reading.source):
            return
        seen = "unknown" if reading.value is None else "yes" if reading.value else "no"
        log.info("condition %s: %s (%s: %s)", self.name, seen, reading.source, reading.detail)
        if self.on_change is None:
            return
        try:
            self.on_change(reading)
        except Exception:  # a listener's bug must not end the watch
            log.exception("condition %s: a listener failed on %s", self.name, reading)


async def first_read(changes: Changes, wait_s: float) -> None:
    """Wait (bounded) for a source's first reading: a caller that starts a source and shows it
    at once sees what it read, and a slow OS delays it by `wait_s` at most."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(wait_s):
            await changes.read.wait()


class PolledSource:
    """`probe` every `interval_s` while it answers, every `retry_s` while it reads unknown."""

    def __init__(self, name: str, probe: Probe, unknown: Reading, *, interval_s: float, retry_s: float = 60.0,
                 clock: Clock | None = None, timeout_s: float = PROBE_TIMEOUT_S,
                 on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
        self.name = name
        self._probe = probe
        self._unknown = unknown
        self._changes = Changes(name, unknown)
        self.interval_s = interval_s
        self.retry_s = retry_s
        self._clock = clock or Clock()
        self._timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._on_stop = on_stop
        self.first_read_s = FIRST_READ_S

    def reading(self) -> Reading:
        return self._changes.last

    async def start(self, on_change: Callable[[Reading], None]) -> None:
        """The first reading is asked at once and waited for up to `FIRST_READ_S`."""
        self._changes.on_change = on_change
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"condition-{self.name}")
            await first_read(self._changes, self.first_read_s)

    async def poll_once(self) -> Reading:
        """Ask the platform once; the reading is kept and, when it changed, told."""
        try:
            async with asyncio.timeout(self._timeout_s):
                reading = await self._probe()
        except TimeoutError:
            reading = Reading(None, self._unknown.source, f"no answer within {self._timeout_s:g} s")
        except Exception as exc:  # the platform's own error, whatever its type: unknown, never raised
            reading = Reading(None, self._unknown.source, why(exc))
        self._changes.set(reading)
        return reading

    def poke(self) -> None:
        """Ask again now (e.g. after a wake from sleep) instead of at the next interval."""
        self._kick.set()

    async def _run(self) -> None:
        await self.poll_once()
        while True:
            wait = self.interval_s if self._changes.last.value is not None else self.retry_s
            await sleep_or_kick(self._clock, wait, self._kick)
            await self.poll_once()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._changes.on_change = None
        if self._on_stop is not None:
            try:
                await self._on_stop()
            except Exception as exc:  # closing what the probe opened (a bus): nothing more to do
                log.debug("condition %s: closing: %s", self.name, why(exc))


class Unreadable:
    """A condition this platform cannot read: unknown for good, in words (it never stops a node)."""

    def __init__(self, name: str, source: str, detail: str) -> None:
        self.name = name
        self._reading = Reading(None, source, detail)

    async def start(self, on_change: Callable[[Reading], None]) -> None:
        return None

    def reading(self) -> Reading:
        return self._reading

    async def stop(self) -> None:
        return None
