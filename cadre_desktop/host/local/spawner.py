"""Starts in flight: the OS-heavy part of a start (fork/exec) on a small pool of threads.

`subprocess.Popen` holds its caller until the child has exec'd; in a storm of
starts the new child waits for a CPU behind every other node starting, so one
Popen on the event loop held it 30-60 ms (issue 26). A Popen on a worker thread
holds only that thread: the loop keeps serving while the child comes up.

What is decided and reserved (the handles it replaces, ports, environment,
handle id, the standby it takes) stays on the loop, before the spawn; what is
tracked (the handle, its exit watch, `state.json`) on the loop, after it. This
module is the gap between the two (a standby's hand-over waits in it too), and
it is where a start can be let go of:

* a start whose caller is cancelled, or whose driver is closed, while its child
  comes up, is *abandoned*: the child it brings is ended at once (on the worker
  thread if it comes after, or on the loop if it came before), so no start ever
  leaves a child nobody tracks;
* one start per node at a time (`idle` waits for the node's start in flight), so a
  stop, a Remove or a Quit that waits for it finds the child the start made.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from cadre_desktop.errors import SpawnError

#: How many children may be coming up at once (a storm's starts queue behind them).
WORKERS = 4

T = TypeVar("T")


class _Outcome(Generic[T]):
    """What one start's thread brought, or that nobody wants it any more (then it is discarded)."""

    def __init__(self, discard: Callable[[T], None]) -> None:
        self._lock = threading.Lock()
        self._discard = discard
        self.abandoned = False
        self.result: T | None = None

    def deliver(self, result: T) -> None:
        """From the worker thread: keep `result` for the loop, or end it if the start was let go."""
        with self._lock:
            if not self.abandoned:
                self.result = result
                return
        self._discard(result)

    def abandon(self) -> None:
        """Nobody takes this start's child: ended now if it is there, else when it comes."""
        with self._lock:
            self.abandoned = True
            result, self.result = self.result, None
        if result is not None:
            self._discard(result)


class Spawner(Generic[T]):
    """Runs each start's blocking part on a worker thread; knows which nodes have one in flight."""

    def __init__(self, discard: Callable[[T], None], workers: int = WORKERS) -> None:
        #: Ends what a start brought that nobody takes (thread-safe: called on either side).
        self.discard = discard
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._flight: dict[str, tuple[_Outcome[T], asyncio.Event]] = {}
        self.closed = False

    def busy(self, node_id: str) -> bool:
        return node_id in self._flight

    async def idle(self, node_id: str | None = None) -> None:
        """Wait until `node_id` (None: every node) has no start in flight. Returns without
        yielding when there is none, so what the caller does next follows with no gap."""
        while True:
            waiting = [ev for nid, (_o, ev) in self._flight.items() if node_id is None or nid == node_id]
            if not waiting:
                return
            await waiting[0].wait()

    async def run(self, node_id: str, work: Callable[[], T]) -> T:
        """`work()` on a worker thread; its result, once the caller may still take it.

        SpawnError when the spawner was closed (before or during). A cancelled caller's
        child is ended. The caller must have waited for `idle(node_id)` with no await since.
        """
        outcome: _Outcome[T] = self._take_off(node_id)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="cadre-spawn")
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, _run, work, outcome)
        except BaseException:
            outcome.abandon()  # cancelled meanwhile: a child that comes after is ended
            raise
        finally:
            self._land(node_id)
        if outcome.abandoned or outcome.result is None:
            raise SpawnError("the host is shutting down")  # closed meanwhile; its child was ended
        return outcome.result

    async def run_here(self, node_id: str, work: Callable[[], Awaitable[T | None]]) -> T | None:
        """`work()` on the loop, tracked in flight as `run` tracks a thread's: for a start that only
        exchanges a message with a process that exists (a parked child taken), where the hop to a
        thread and back would be most of its time. `work` ends what it made if it is cancelled; its
        result is ended here if the spawner was closed meanwhile (SpawnError). None: nothing came."""
        outcome: _Outcome[T] = self._take_off(node_id)
        try:
            result = await work()
        finally:
            self._land(node_id)
        if result is not None and (self.closed or outcome.abandoned):
            self.discard(result)
            raise SpawnError("the host is shutting down")
        return result

    def _take_off(self, node_id: str) -> _Outcome[T]:
        """A start of `node_id` put in flight (SpawnError once closed; never two of one node)."""
        if self.closed:
            raise SpawnError("the host is shutting down")
        if node_id in self._flight:
            raise RuntimeError(f"a second start of node {node_id} while one is in flight")
        outcome: _Outcome[T] = _Outcome(self.discard)
        self._flight[node_id] = (outcome, asyncio.Event())
        return outcome

    def _land(self, node_id: str) -> None:
        """The start of `node_id` is no longer in flight: whoever waits in `idle` goes on."""
        _outcome, done = self._flight.pop(node_id)
        done.set()

    def close(self) -> None:
        """Start nothing more; every start in flight is let go (its child ended when it comes)."""
        self.closed = True
        for outcome, _done in self._flight.values():
            outcome.abandon()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def _run(work: Callable[[], T], outcome: _Outcome[T]) -> None:
    # Run even when let go while it waited for a thread: what `work` holds (a claimed standby)
    # is ended with its result then, never left behind.
    outcome.deliver(work())
