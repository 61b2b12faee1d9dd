"""One writer thread for the host's files: writes off the event loop, grouped.

Why: a storm of respawns (50 nodes killed at once) made the loop wait on two
synced whole-file writes per start (`state.json` and the records, each an fsync
of the file and of its folder), tens of milliseconds each on a busy disk; the
loop stood still for most of the storm. Here every write runs on one daemon
thread, in the order it was asked, and a write asked while the thread is busy
waits for it: writes to the same file that pile up meanwhile are done once,
with the newest content (the files the host writes this way are rewritten whole
from one truth in memory, so the newest holds every change before it).

Each write is still whatever its caller passes (`atomicfile`'s temp file, fsync,
replace, folder fsync): grouping changes how many writes happen, not how one
happens. Whoever waits on a write learns its outcome through its `Future`: done
once the file holding its change is synced, or its error (a write covered by a
later one has the later one's outcome). `then` callbacks run on the loop that
asked, after the sync they report, in the order asked for any one file (files
are written in the order each was first asked in a group).

What not to do: do not hand it a write that reads state the loop mutates (hand
it the bytes, or a snapshot); do not wait on a `Future` from the writer thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Write = Callable[[], None]


@dataclass
class _Job:
    write: Write
    waiters: list[Future[None]] = field(default_factory=list)


class GroupWriter:
    """A daemon thread that runs whole-file writes in order, the newest per file once."""

    def __init__(self, name: str = "cadre-writer") -> None:
        self._name = name
        self._cond = threading.Condition()
        #: key (a file) -> its newest write and everyone waiting for it, in the order first asked.
        self._pending: dict[Hashable, _Job] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Writes run and groups taken (one group: what piled up while the last ran).
        self.writes = 0
        self.groups = 0

    def submit(self, key: Hashable, write: Write) -> Future[None]:
        """Queue `write` for `key`; it replaces a queued write of the same key not yet begun."""
        done: Future[None] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the writer is closing")
            job = self._pending.get(key)
            if job is None:
                self._pending[key] = _Job(write, [done])
            else:
                job.write = write
                job.waiters.append(done)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return done

    def write_now(self, key: Hashable, write: Write) -> None:
        """Queue `write` and wait for it (and what was queued before it): the caller's answer needs it synced."""
        self.submit(key, write).result()

    def submit_then(self, key: Hashable, write: Write, then: Callable[[BaseException | None], None]) -> None:
        """Queue `write`; once it is synced (or failed), call `then(error)` on the running loop."""
        loop = asyncio.get_running_loop()
        done = self.submit(key, write)

        def tell(future: Future[None]) -> None:
            error = future.exception()
            try:
                loop.call_soon_threadsafe(then, error)
            except RuntimeError:  # the loop closed meanwhile: nobody is left to tell
                log.debug("a write finished after its loop closed")
        done.add_done_callback(tell)

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def close(self, timeout: float = 10.0) -> None:
        """Run what is queued, then end the thread (a later submit starts another: a host
        stopped and started again keeps its writer)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            if self._thread is thread and not (thread and thread.is_alive()):
                self._thread, self._closed = None, False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                group, self._pending = self._pending, {}
                self.groups += 1
            for job in group.values():
                self._write(job)

    def _write(self, job: _Job) -> None:
        try:
            job.write()
        except BaseException as exc:  # told to every waiter; the thread goes on with the next file
            self.writes += 1
            for waiter in job.waiters:
                waiter.set_exception(exc)
            return
        self.writes += 1
        for waiter in job.waiters:
            waiter.set_result(None)
