"""The seam every run condition source implements, and what one reading is.

A source reads one fact of this computer (on battery, in use, on a metered network) and
says when it changes. A fact that cannot be read here is `None` (unknown): it never stops
a node, and a source that starts answering later is picked up (`start` keeps trying,
bounded, in the background). Sources never block the event loop: a D-Bus call is awaited
on the loop's own connection, a platform call that can block runs in a thread.

What the platform sources (`battery.py`, `metered.py`, `idle.py`, built by
`platform.make_sources`) promise beyond the Protocol: `start` returns once the first reading
is in, or after 2 s at most (the reading then comes through `on_change`); `on_change` is
called when the value or the source changes, not when only the detail does (an idle time
growing is kept in `reading()` without a call); a listener that raises is logged and the
source goes on; `stop` may be called on a source never started; and a source can be told to
read again at once with `poke()` (after a wake from sleep), where it has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Reading:
    """What a source sees now: `value` True (the condition holds, e.g. on battery), False, or
    None (unknown here), `source` where it was read from ("UPower over the system D-Bus"),
    and `detail` in words for `cadre-desktop conditions` ("on mains power")."""

    value: bool | None
    source: str
    detail: str = ""


class ConditionSource(Protocol):
    """One fact of this computer. `name` is the condition's key ("on_battery", "in_use",
    "metered")."""

    name: str

    async def start(self, on_change: Callable[[Reading], None]) -> None:
        """Begin watching; `on_change` hears every new reading (on the event loop). Never raises:
        a source it cannot reach reads unknown and is tried again later."""
        ...

    def reading(self) -> Reading:
        """The last reading (unknown until the first)."""
        ...

    async def stop(self) -> None:
        """Stop watching and close what it opened (a D-Bus connection, a thread)."""
        ...
