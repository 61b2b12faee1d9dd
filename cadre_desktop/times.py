"""Times read from text, in one place: RFC 3339 (ISO 8601) strings from a file, the wire or a
person, checked for their length, their zone and the calendar's edges before anyone adds to them.

Python's `datetime` ends at year 1 and year 9999 *in its own zone*: `9999-12-31T23:00:00-05:00`
parses, and then overflows when it is put in UTC, compared with an aware time in another zone or
moved by a `timedelta`. A time is taken only when its UTC value lies between `EARLIEST` and
`LATEST`, far enough inside the calendar that a year (the longest hold) can be added to it or
taken from it in any zone; anything else is "not a time", for every caller alike.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: The longest text read as a time (the longest RFC 3339 form with microseconds is 32 characters).
MAX_CHARS = 64
#: The window a time must fall in (UTC): no hold, wake or record of ours lies outside it.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def parse_time(text: object, *, zone: str = "required") -> datetime | None:
    """`text` as an aware time (in UTC), or None when it is not one we take.

    `zone`: "required" (an RFC 3339 time names its offset; one without is None), "utc" (a time
    without one is UTC: our own records), or "local" (a time without one is this computer's local
    time: a person's). A trailing `Z` or `z` is UTC. Out of the window (`EARLIEST`..`LATEST`),
    longer than `MAX_CHARS` or not a string: None.
    """
    if not isinstance(text, str) or not 0 < len(text) <= MAX_CHARS:
        return None
    value = text.strip()
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        if zone == "required":
            return None
        if zone == "utc":
            when = when.replace(tzinfo=UTC)
    try:
        utc = when.astimezone(UTC)  # a naive time here is local ("local")
    except (OverflowError, ValueError, OSError):
        return None
    return utc if EARLIEST <= utc <= LATEST else None


def in_window(when: datetime) -> bool:
    """Whether an aware time lies in the window `parse_time` takes (a time made by arithmetic)."""
    try:
        utc = when.astimezone(UTC)
    except (OverflowError, ValueError, OSError):
        return False
    return EARLIEST <= utc <= LATEST


def plus(when: datetime, delta: timedelta) -> datetime | None:
    """`when + delta`, or None where that leaves the calendar."""
    try:
        moved = when + delta
    except OverflowError:
        return None
    return moved if in_window(moved) else None
