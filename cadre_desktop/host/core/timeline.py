"""Supervision time: the monotonic clock while running, the wall clock only across restarts.

A backoff measured on the wall clock would keep a crashed node down for as
long as the clock was stepped back. So every wall-clock time from a record is
turned, the first time it is looked at, into a point on the monotonic clock
(`now_mono - max(0, now_wall - then)`), and measured from there on. A time
from the future (a clock that was ahead when it was written) counts as "just
now": a wait is never longer than its own length.
"""

from __future__ import annotations

from cadre_desktop.host.core.clock import Clock, parse_iso


class Timeline:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        #: key -> (the wall time it was derived from, the monotonic point it became)
        self._anchors: dict[tuple[str, str], tuple[str, float]] = {}
        self._seen: dict[str, float] = {}

    def mark(self, key: tuple[str, str], wall: str) -> None:
        """`wall` is now: this process made it, so its monotonic point is exact."""
        self._anchors[key] = (wall, self.clock.monotonic())

    def since(self, key: tuple[str, str], wall: str | None) -> float | None:
        """Seconds since `wall`, never negative; None when it is no time at all."""
        when = parse_iso(wall)
        if when is None or wall is None:
            return None
        anchor = self._anchors.get(key)
        if anchor is None or anchor[0] != wall:
            elapsed = max(0.0, (self.clock.now() - when).total_seconds())
            anchor = (wall, self.clock.monotonic() - elapsed)
            self._anchors[key] = anchor
        return self.clock.monotonic() - anchor[1]

    def seen_for(self, key: str) -> float:
        """Seconds since `key` was first seen (or `started`) by this process."""
        now = self.clock.monotonic()
        return now - self._seen.setdefault(key, now)

    def started(self, key: str) -> None:
        self._seen[key] = self.clock.monotonic()
