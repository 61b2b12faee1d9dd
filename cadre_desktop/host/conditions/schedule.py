"""The weekly schedule: when nodes may run, in local time (`run_schedule`).

Each window names days and a time from and to, in the local time of this computer; a window
whose `to` comes before its `from` crosses midnight and ends the next day ("fri 22:00 to
07:00" runs into Saturday morning). The windows are laid on the calendar for the days around
now in the local zone (`zoneinfo`), then compared in UTC: a daylight-saving change makes a
night one hour shorter or longer, never shifts it, and a time the change skips (02:30 on
Europe/Berlin's last Sunday of March) is read with the offset before it. The zone is read
again at every look, so a time zone changed while the host runs is followed.

Settings check the windows (`settings.check_run_schedule`); this module only lays them out.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from pathlib import Path

from cadre_desktop.settings import DAYS, parse_hhmm

log = logging.getLogger(__name__)

#: Windows are laid out this many days either side of today: a week and a window's night.
_SPAN_DAYS = 8


def local_zone() -> tzinfo:
    """This computer's time zone now: $TZ, else /etc/localtime (both zoneinfo, DST and all), else the
    fixed offset the OS gives now (read again at each look, so a change of it is followed)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # here: a home with no schedule never loads it

    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    localtime = Path("/etc/localtime")
    try:
        with localtime.open("rb") as f:
            return ZoneInfo.from_file(f, key=zone_name(localtime))
    except (OSError, ValueError):
        pass
    zone = datetime.now().astimezone().tzinfo
    return zone if zone is not None else UTC


def zone_name(localtime: Path) -> str:
    """The IANA name /etc/localtime points at ("Europe/Berlin"), else "localtime"."""
    try:
        target = str(localtime.resolve())
    except OSError:
        return "localtime"
    marker = "zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "localtime"


@dataclass(frozen=True)
class Window:
    days: frozenset[int]
    start_min: int
    end_min: int

    @classmethod
    def of(cls, raw: Mapping[str, object]) -> Window:
        start, end = parse_hhmm(raw["from"]), parse_hhmm(raw["to"], end=True)
        days = raw["days"]
        if start is None or end is None or not isinstance(days, Iterable):
            raise ValueError(f"not a checked window: {raw!r}")
        return cls(frozenset(DAYS.index(d) for d in days), start, end)

    def spans(self, day: date, zone: tzinfo) -> list[tuple[datetime, datetime]]:
        """Where this window lies if it opens on `day` (none when `day` is not one of its days), in UTC."""
        if day.weekday() not in self.days:
            return []
        start = _at(day, self.start_min, zone)
        end_day = day if self.end_min > self.start_min else day + timedelta(days=1)
        return [(start, _at(end_day, self.end_min, zone))]


def _at(day: date, minutes: int, zone: tzinfo) -> datetime:
    if minutes >= 24 * 60:
        day, minutes = day + timedelta(days=1), minutes - 24 * 60
    local = datetime.combine(day, time(minutes // 60, minutes % 60), tzinfo=zone)
    return local.astimezone(UTC)


@dataclass(frozen=True)
class Moment:
    """Where now lies: inside a window or not, and when that changes (None: never)."""

    inside: bool
    next_change: datetime | None


class Schedule:
    def __init__(self, windows: Sequence[Mapping[str, object]], zone: Callable[[], tzinfo] = local_zone) -> None:
        self.windows = [Window.of(w) for w in windows]
        self.zone = zone

    def at(self, now: datetime) -> Moment:
        zone = self.zone()
        today = now.astimezone(zone).date()
        spans = sorted(s for offset in range(-_SPAN_DAYS, _SPAN_DAYS + 1) for w in self.windows
                       for s in w.spans(today + timedelta(days=offset), zone))
        merged: list[tuple[datetime, datetime]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        horizon = now + timedelta(days=_SPAN_DAYS - 1)
        for start, end in merged:
            if start <= now < end:
                return Moment(True, end if end < horizon else None)
            if start > now:
                return Moment(False, start)
        return Moment(False, None)

    def words(self, when: datetime) -> str:
        """A change's time as a person reads it: "Mon 22:00", local."""
        return when.astimezone(self.zone()).strftime("%a %H:%M")

    def zone_words(self) -> str:
        zone = self.zone()
        return str(getattr(zone, "key", None) or zone)
