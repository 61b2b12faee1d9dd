"""When the supervisor's passes run; the supervisor says what one pass does.

Four triggers bring a pass: `kick` (start-up, the keyring coming back), every
child exit (a storm of exits coalesces into one queued pass, and exits that
come while it waits for the serial queue join it; only those after it began
looking bring another), the periodic sweep (the backstop for a death no
event reported), and a timer armed for the moment the earliest backoff or
start grace ends. A pass that fails is logged (by the pass); the next trigger tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine

from cadre_desktop.host.core.clock import Clock

log = logging.getLogger(__name__)


async def breathe() -> None:
    """Let everything already due run before a pass goes on.

    A start holds the loop for its spawn and a synced file write, so a storm of
    fifty would stall the control API, the probe and the UI for all of them
    together. `sleep(0)` would queue the pass ahead of timers that fell due
    meanwhile; a zero-delay timer queues it behind them.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    handle = loop.call_later(0, lambda: None if done.done() else done.set_result(None))
    try:
        await done
    finally:
        handle.cancel()


class PassSchedule:
    """The triggers of one supervisor's passes, and the tasks they run on."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        #: One pass (the supervisor queues it behind any other, and logs its failure), given by
        #: `serve`; called with the trigger's name.
        self._run: Callable[[str], Awaitable[list[str]]] | None = None
        #: Read at every sweep: live settings may change it.
        self._sweep_s: Callable[[], float] = lambda: 60.0
        #: The sweep's housekeeping, before its pass.
        self._chores: Callable[[], Awaitable[None]] | None = None
        #: Set by `stop`: no new pass, and a pass in flight drops the records it has not reached.
        self.stopped = False
        self._sweep: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._exit_pass_queued = False
        self._exit_pass_wanted = False
        #: An exit pass is queued and has not begun: exits now ride on it (it has not looked yet).
        self._exit_pass_waiting = False
        self._due_task: asyncio.Task[object] | None = None
        #: When (monotonic) the armed due pass fires; None when none is armed.
        self.due_at: float | None = None

    @property
    def started(self) -> bool:
        return self._sweep is not None

    def serve(self, run: Callable[[str], Awaitable[list[str]]], sweep_s: Callable[[], float],
              chores: Callable[[], Awaitable[None]]) -> None:
        """What a trigger runs (`run`, the supervisor's pass); the sweep every `sweep_s()`, its `chores` first."""
        self._run, self._sweep_s, self._chores = run, sweep_s, chores

    def start(self) -> None:
        self.stopped = False
        self._sweep = asyncio.create_task(self._sweep_forever(), name="supervisor-sweep")

    async def stop(self) -> None:
        """End the sweep and every queued or timed pass."""
        self.stopped = True
        if self._sweep:
            self._sweep.cancel()
            await asyncio.gather(self._sweep, return_exceptions=True)
            self._sweep = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def kick(self, trigger: str) -> asyncio.Task[object] | None:
        """Run a pass soon; before `start` (the start-up pass knows the clean-quit list) this does nothing."""
        if self.stopped or self._sweep is None:
            return None
        return self._spawn(self._pass(trigger), f"supervisor-{trigger}")

    def after_exit(self) -> None:
        """A child exited (or the probe has news): one pass is queued, and exits until it starts ride on it."""
        if self.stopped or self._exit_pass_waiting:
            return
        self._exit_pass_wanted = True
        if self._exit_pass_queued:
            return
        self._exit_pass_queued = True
        self._keep(asyncio.create_task(self._exit_passes(), name="supervisor-exit"))

    async def _exit_passes(self) -> None:
        """The exit's task: the pass (`serve`'s), again while exits came after it began looking."""
        try:
            while self._exit_pass_wanted and not self.stopped and self._run is not None:
                self._exit_pass_wanted = False
                self._exit_pass_waiting = True  # until the pass holds the queue (`began`)
                await self._run("exit")
                self._exit_pass_waiting = False
        finally:
            self._exit_pass_queued = self._exit_pass_waiting = False

    def began(self) -> None:
        """A pass holds the serial queue and is about to look: exits from now on need another."""
        self._exit_pass_waiting = False

    def arm(self, waits: list[float]) -> None:
        """Bring the next pass forward to when the earliest backoff or start grace ends.

        `waits` are a pass's own verdicts (seconds until each is due), so the
        timer costs no second look at every node.
        """
        if self.stopped or not waits:
            return
        due = self.clock.monotonic() + min(waits)
        if self._due_task is not None and not self._due_task.done():
            if self.due_at is not None and self.due_at <= due:
                return
            self._due_task.cancel()
        self.due_at = due
        delay = max(0.0, min(waits))

        async def fire() -> None:
            await self.clock.sleep(delay)
            self._due_task, self.due_at = None, None  # this pass may arm the next one
            await self._pass("due")

        self._due_task = self._spawn(fire(), "supervisor-due")

    async def _pass(self, trigger: str) -> list[str]:
        return [] if self._run is None else await self._run(trigger)

    async def _sweep_forever(self) -> None:
        while True:
            await self.clock.sleep(self._sweep_s())
            if self._chores is not None:
                await self._chores()
            await self._pass("timer")

    def _spawn(self, work: Coroutine[object, None, object], name: str) -> asyncio.Task[object]:
        return self._keep(asyncio.create_task(work, name=name))

    def _keep(self, task: asyncio.Task[object]) -> asyncio.Task[object]:
        """A task of these passes, ended by `stop`."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
