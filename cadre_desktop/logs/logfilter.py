"""Logs that someone else cannot fill: repeated lines are rate-limited, loop errors are one line.

Anything a client can trigger over and over (a malformed request, a refused
connection, a node that keeps not answering) would otherwise write a line each
time, and a flood writes the disk full: 69 MB of tracebacks in one experiment.
`RepeatFilter` lets the first few lines of a kind through in each window and
counts the rest; the next line of that kind that passes says how many were
left out. Lines of a kind are the same message with its numbers taken out (so
ports, pids and timings do not make every line new). A budget for all lines of
the window bounds a flood of lines that all differ. Errors and worse pass the
per-kind limit's first lines like the rest, and are never eaten by the budget
alone.

`quiet_loop_errors` makes the event loop's own error reports (an accept that
ran out of descriptors, a connection reset mid-write) one line each instead of
a traceback, through the same filter.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

_DIGITS = re.compile(r"\d+")
_MAX_KINDS = 1000


class RepeatFilter(logging.Filter):
    def __init__(self, *, burst: int = 5, window_s: float = 60.0, budget: int = 300,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.budget = budget
        self.clock = clock
        #: kind -> [window start, lines passed, lines left out]
        self._kinds: OrderedDict[tuple[Any, ...], list[float]] = OrderedDict()
        self._window_start = clock()
        self._window_lines = 0

    def filter(self, record: logging.LogRecord) -> bool:
        # One verdict per record: the same filter sits on every handler (stderr, file).
        verdict = getattr(record, "_cadre_repeat_verdict", None)
        if verdict is None:
            verdict = self._decide(record)
            record._cadre_repeat_verdict = verdict
        return verdict

    def _decide(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        if now - self._window_start >= self.window_s:
            self._window_start, self._window_lines = now, 0
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: let the handler report it
            return True
        kind = (record.name, record.levelno, _DIGITS.sub("#", message)[:200])
        entry = self._kinds.get(kind)
        if entry is None or now - entry[0] >= self.window_s:
            left_out = entry[2] if entry else 0
            entry = [now, 0, 0]
            self._kinds[kind] = entry
            if left_out:
                self._note(record, f"{left_out} more like it were left out")
        self._kinds.move_to_end(kind)
        while len(self._kinds) > _MAX_KINDS:
            self._kinds.popitem(last=False)
        over_budget = self._window_lines >= self.budget and record.levelno < logging.ERROR
        if entry[1] >= self.burst or over_budget:
            entry[2] += 1
            return False
        entry[1] += 1
        self._window_lines += 1
        if entry[1] == self.burst:
            self._note(record, f"more lines like it in the next {self.window_s:.0f} s are left out")
        return True

    @staticmethod
    def _note(record: logging.LogRecord, note: str) -> None:
        record.msg = f"{record.getMessage()} [{note}]"
        record.args = None


def install(handlers: list[logging.Handler], **kwargs: Any) -> RepeatFilter:
    """Put one RepeatFilter on every handler (the same one, so each record is judged once)."""
    repeat = RepeatFilter(**kwargs)
    for handler in handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(repeat)
    return repeat


def quiet_loop_errors(loop: asyncio.AbstractEventLoop, logger: logging.Logger | None = None) -> None:
    """Report the loop's OS-level errors as one line (no traceback); others as before."""
    target = logger or logging.getLogger("asyncio")

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError):
            target.error("%s: %s: %s", context.get("message", "event loop error"), type(exc).__name__, exc)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
