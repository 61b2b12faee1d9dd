"""In-process fakes for the node's seams."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    """Both clocks of :class:`cadre_desktop.node.clock.Clock`, moved by hand."""

    now: float = 1_700_000_000.0
    mono: float = 1000.0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds
