"""The address the host advertises: its one owner, which notices a new one, and a wake from sleep.

A home host is often a laptop: it changes networks, sleeps and wakes. Nodes
learn the address they advertise only at start, so when the machine's address
changes each running node that still advertises the old one must be restarted
(through the supervisor's serial `restart`, which spends no budget). A flapping
network must cause one round of restarts, not one per flap: a new address is
acted on only once it has held for the debounce period.

A wake shows as a gap between the wall clock and the monotonic clock (the
monotonic clock stops while the machine sleeps). After one, the host probes
every node at once and tells the UI, which holds back notifications while
things settle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Protocol

from cadre_desktop.host.core.clock import Clock, sleep_or_kick
from cadre_desktop.host.core.driver import NodeDriver
from cadre_desktop.host.core.records.rowstore import Row

log = logging.getLogger(__name__)

AddressSource = Callable[[], str]


class AddressWatcher:
    def __init__(
        self,
        *,
        source: AddressSource,
        clock: Clock,
        on_change: Callable[[str, str], Awaitable[None]],
        on_wake: Callable[[float], None] | None = None,
        interval_s: float = 15.0,
        debounce_s: float = 3.0,
        wake_gap_s: float = 20.0,
    ) -> None:
        self.source = source
        self.clock = clock
        self.on_change = on_change
        self.on_wake = on_wake
        self.interval_s = interval_s
        self.debounce_s = debounce_s
        self.wake_gap_s = wake_gap_s
        #: The address nodes are told to advertise now (what the source said, once it held).
        self.current = self._read(fallback="127.0.0.1")
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._marks = (clock.now(), clock.monotonic())

    def _read(self, fallback: str | None = None) -> str:
        try:
            return self.source()
        except Exception as exc:  # a flaky source never stops the watcher: it keeps what it has
            log.debug("address source failed: %s", exc)
            return self.current if fallback is None else fallback

    def start(self) -> None:
        if self._task is None:
            self._marks = (self.clock.now(), self.clock.monotonic())  # a wake is measured from here
            self._task = asyncio.create_task(self._loop(), name="address-watcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def check_soon(self) -> None:
        """Look at the address now (SIGHUP, a wake, an OS network notification)."""
        self._kick.set()

    def detect_wake(self) -> float | None:
        """Seconds the machine slept since the last look, if it looks like it did."""
        wall, mono = self.clock.now(), self.clock.monotonic()
        last_wall, last_mono = self._marks
        self._marks = (wall, mono)
        gap = (wall - last_wall).total_seconds() - (mono - last_mono)
        return gap if gap > self.wake_gap_s else None

    async def _loop(self) -> None:
        while True:
            await sleep_or_kick(self.clock, self.interval_s, self._kick)
            slept = self.detect_wake()
            if slept is not None:
                log.info("the machine seems to have slept for %.0fs; checking every node now", slept)
                if self.on_wake:
                    self.on_wake(slept)
            try:
                await self.check()
            except Exception:  # a failed check must not end the watch for the host's life; the next one retries
                log.exception("address check failed")

    async def check(self) -> bool:
        """Act on a new address once it has held for the debounce period."""
        seen = self._read()
        if seen == self.current:
            return False
        # Wait it out: a flap (A -> B -> A) ends where it started and does nothing.
        await self.clock.sleep(self.debounce_s)
        settled = self._read()
        if settled == self.current:
            log.info("address flapped to %s and back; nothing to do", seen)
            return False
        if settled != seen:
            # Still moving: look again after another debounce rather than chase it.
            self.check_soon()
            return False
        old, self.current = self.current, settled
        log.info("this machine's address changed from %s to %s", old, settled)
        await self.on_change(old, settled)
        return True


class Advertised(Row, Protocol):
    """What `restart_stale` reads of a row of any kind (a hosted node's record, a lent node's donation)."""

    @property
    def handle(self) -> str | None: ...

    @property
    def status(self) -> object: ...


async def restart_stale(rows: Iterable[Advertised], supervised: Collection[object], driver: NodeDriver,
                        restart: Callable[..., Awaitable[object]], new: str, what: str) -> None:
    """Restart, one at a time, each supervised row whose running child still advertises
    another address than `new` (a restart spends no budget). A restart that fails leaves
    the node down; the exit its stop raised hands it to the crash path."""
    for row in rows:
        handle = driver.get(row.handle)
        if row.status not in supervised or handle is None or not handle.alive or handle.advertise_host == new:
            continue
        try:
            await restart(row.id, only_if_running=True)
        except Exception as exc:  # one node that fails to restart must not keep the others on the old address
            log.error("restarting %s %s for the new address failed: %s", what, row.id, exc)
