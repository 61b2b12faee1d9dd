"""Never twice, the node's side: a node started with a lease stops serving at its deadline.

The host gives the deadline at start (`CADRE_LEASE_DEADLINE`, boot clock) and moves it on
by writing `lease.json` in the work folder while it renews its lease (`wire/lease.py`). Two
guards hold the line, because after a suspend the event loop's timers are late:

* every request is checked on arrival and again before its answer leaves (`guard`): past the
  deadline the file is read once more (the host may have moved it on), and if the deadline
  still lies behind, the connection is reset unanswered and the node stops. A machine that
  wakes from a night asleep never answers a request it received after its deadline;
* a watch task wakes at the deadline (at most every `MAX_NAP_S`, since the loop's clock may
  not count a suspend; each wake a stat of the lease file, read when it changed, so a host
  that lost its lease can bring the deadline forward) and stops the node the same way when
  nobody asks anything.

The node then exits with `ExitCode.LEASE_EXPIRED`: its host, if it still holds the node,
starts it again with a fresh deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from cadre_desktop.errors import Invalid, MachineError
from cadre_desktop.wire import lease as wire_lease
from cadre_desktop.wire.httpmsg import Answer, Request
from cadre_desktop.wire.lease import LeaseTerms

log = logging.getLogger("cadre.node.lease")

#: The longest the watch task sleeps between looks at the boot clock.
MAX_NAP_S = 1.0

Handler = Callable[[Request], Awaitable[Answer]]


class LeaseExpired(MachineError, ConnectionAbortedError):
    """Raised in place of an answer: the lease ran out (the computer slept, or its host lost the
    lease). An OSError, so the HTTP server resets the connection and sends nothing."""

    code = "lease_expired"


class LeaseWatch:
    """The lease a node runs under: its generation, its deadline, and whether it may serve now."""

    def __init__(self, terms: LeaseTerms, node_dir: Path, on_expired: Callable[[], None],
                 now_ns: Callable[[], int] = wire_lease.boot_ns) -> None:
        self.terms = terms
        self._file = node_dir / wire_lease.LEASE_FILE
        self._on_expired = on_expired
        self._now_ns = now_ns
        self.expired = False
        #: The lease file as it was when this run began: not this run's (an earlier run's, maybe an
        #: earlier boot's, whose boot-clock deadline means nothing now), so never read.
        self._at_start = self._stat()
        self._stamp = self._at_start

    @property
    def generation(self) -> int:
        return self.terms.generation

    def _reread(self) -> None:
        """Take the deadline of the same generation from `lease.json` (later or sooner: the host
        may have lost its lease); another generation's, a damaged file, or the file as it was when
        this run began (the start's own terms came in its environment), is ignored."""
        if self._at_start is not None and self._stat() == self._at_start:
            return
        try:
            found = wire_lease.read(self._file.parent)
        except (OSError, Invalid) as err:
            log.warning("the lease file is unusable (%s); the deadline stays", err)
            return
        if found is not None and found.generation == self.terms.generation:
            self.terms = found

    def may_serve(self) -> bool:
        """False once the deadline has passed and the lease file does not move it on (then for good)."""
        if self.expired:
            return False
        if not self.terms.expired(self._now_ns()):
            return True
        self._reread()
        if not self.terms.expired(self._now_ns()):
            return True
        self.expired = True
        log.warning("the lease of generation %s ran out; the node stops serving", self.terms.generation)
        self._on_expired()
        return False

    def guard(self, handler: Handler) -> Handler:
        """`handler` with the lease checked before and after it: past it, no answer at all."""
        async def guarded(request: Request) -> Answer:
            if not self.may_serve():
                raise LeaseExpired("the node's lease has run out")
            answer = await handler(request)
            if not self.may_serve():
                raise LeaseExpired("the node's lease has run out")
            return answer
        return guarded

    def _stat(self) -> tuple[int, int] | None:
        try:
            found = self._file.stat()
        except OSError:
            return None
        return found.st_ino, found.st_mtime_ns

    def _changed(self) -> bool:
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return True

    async def watch(self) -> None:
        """Until the lease runs out: then `on_expired` has been called and this returns. The lease
        file is looked at on every wake (a stat), so a deadline the host brings forward holds too."""
        while True:
            if self._changed():
                self._reread()
            if not self.may_serve():
                return
            left_s = (self.terms.deadline_ns - self._now_ns()) / 1e9
            await asyncio.sleep(min(max(left_s, 0.0), MAX_NAP_S))
