"""This computer's condition sources, from the settings: the one factory (`make_sources`), and
the readings as plain data for the command line, the control API and the window (`describe`).

Only the conditions that are on get a source: one that is off opens no D-Bus connection and
asks nothing, and reads as "off" where the conditions are shown (`CONDITIONS` names each
condition's setting, so a front end lists the off ones too). A change of these settings
(`pause_on_battery`, `pause_when_in_use`, `in_use_idle_minutes`, `pause_on_metered_network`)
means: stop the old sources, `make_sources` again, start the new ones.

The settings are read with `getattr` and their defaults (on battery on, in use off with 3
minutes, metered on), so a `Settings` without these keys works too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

from cadre_desktop.host.conditions.battery import battery_source
from cadre_desktop.host.conditions.idle import idle_source
from cadre_desktop.host.conditions.metered import metered_source
from cadre_desktop.host.conditions.source import ConditionSource
from cadre_desktop.jsontypes import JSONObject

#: Each condition (a source's `name`), the setting that turns it on, and its default.
CONDITIONS: dict[str, tuple[str, bool]] = {
    "on_battery": ("pause_on_battery", True),
    "in_use": ("pause_when_in_use", False),
    "metered": ("pause_on_metered_network", True),
}
#: A condition that holds, as a node's `hold_reason` would say it.
HOLD_WORDS: dict[str, str] = {
    "on_battery": "on battery",
    "in_use": "the computer is in use",
    "metered": "on a metered network",
}
IDLE_MINUTES_DEFAULT = 3.0


def condition_on(settings: object, name: str) -> bool:
    """Whether condition `name` is on in `settings` (its default when the key is missing or not a boolean)."""
    key, default = CONDITIONS[name]
    value = getattr(settings, key, default)
    return value if isinstance(value, bool) else default


def idle_minutes(settings: object) -> float:
    """`in_use_idle_minutes`, else 3: a number above zero."""
    value = getattr(settings, "in_use_idle_minutes", IDLE_MINUTES_DEFAULT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return IDLE_MINUTES_DEFAULT
    return float(value)


def make_sources(settings: object, platform: str = sys.platform, env: Mapping[str, str] | None = None
                 ) -> list[ConditionSource]:
    """The sources of the conditions that are on, for this platform (none started yet: the caller
    starts them, and stops them at the end or when these settings change)."""
    sources: list[ConditionSource] = []
    if condition_on(settings, "on_battery"):
        sources.append(battery_source(platform))
    if condition_on(settings, "in_use"):
        sources.append(idle_source(idle_minutes(settings), platform, env=os.environ if env is None else env))
    if condition_on(settings, "metered"):
        sources.append(metered_source(platform))
    return sources


def describe(sources: Iterable[ConditionSource]) -> list[JSONObject]:
    """Each source's reading now, as JSON-ready data: `condition` (its name), `value` (true, false or
    null), `seen` ("yes", "no" or "unknown"), `source` (where from) and `detail` (in words)."""
    rows: list[JSONObject] = []
    for source in sources:
        reading = source.reading()
        seen = "unknown" if reading.value is None else "yes" if reading.value else "no"
        rows.append({"condition": source.name, "value": reading.value, "seen": seen, "source": reading.source,
                     "detail": reading.detail})
    return rows
