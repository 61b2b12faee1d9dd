"""A run condition source the test sets by hand (`ConditionSource`): on battery, in use, metered."""

from __future__ import annotations

from collections.abc import Callable

from cadre_desktop.host.conditions.source import Reading


class FakeSource:
    def __init__(self, name: str, value: bool | None = None, source: str = "a fake source") -> None:
        self.name = name
        self._reading = Reading(value, source, "")
        self._on_change: Callable[[Reading], None] | None = None
        self.started = self.stopped = False

    async def start(self, on_change: Callable[[Reading], None]) -> None:
        self._on_change = on_change
        self.started = True

    def reading(self) -> Reading:
        return self._reading

    def set(self, value: bool | None, detail: str = "") -> None:
        """A new reading, told as the real source tells it (on the loop, through on_change)."""
        self._reading = Reading(value, self._reading.source, detail)
        if self._on_change is not None:
            self._on_change(self._reading)

    async def stop(self) -> None:
        self.stopped = True
