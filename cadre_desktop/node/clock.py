"""Time, through one seam.

Two clocks with two jobs: wall time (seconds since the epoch) for facts that outlive
the process, such as when an invitation expires, and monotonic time for durations
inside one run, such as a rate-limit lockout. Tests pass a fake with both.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def wall(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def iso_utc(epoch_s: float) -> str:
    """``2024-05-01T12:00:00Z``: how every time appears in the HTTP API.

    With ``time`` rather than ``datetime``, which a node would import for this alone.
    """
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))
