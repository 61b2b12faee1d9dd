"""Holds: a node kept down on purpose (paused, sleeping until a time, done), and its release.

A person holds a node (Pause), or the node holds itself (its run.json at an
exit with code 0, `runfile.py`). A hold spends no attempt and sends no
notification; it is in the record, so it outlives the host. A sleeping node's
wait runs on the timeline (monotonic while the host runs, the wall clock
across a restart), as a backoff's does. Resume (the seed's *demand*), a wake
and a Retry of a `done` node release it: the node comes back to the status its
kind's Retry gives it, with its budget untouched.

The supervisor decides (`decide.py`) and calls these on its serial queue; this
module only writes the holds and their releases. What a node asked for at its
exit is read with the exit's other facts (`exits.ExitBook`).
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta
from enum import Enum

from cadre_desktop.errors import Invalid
from cadre_desktop.host.core.clock import Clock, iso, parse_iso, stamp
from cadre_desktop.host.core.records.lifecycle import AnyLife, Change, Supervised
from cadre_desktop.host.core.records.records import HeldBy, Hold
from cadre_desktop.host.core.timeline import Timeline
from cadre_desktop.times import parse_time

log = logging.getLogger(__name__)


#: The longest a person may put a node to sleep for.
MAX_PAUSE_MS = 366 * 24 * 3600 * 1000


def parse_rfc3339(text: object) -> datetime | None:
    """An RFC 3339 time with its zone ("2026-01-01T07:00:00Z", "...+01:00") inside the calendar's
    window (`times.parse_time`); anything else is None."""
    return parse_time(text, zone="required")


def pause_end(now: datetime, for_ms: int | None, until: datetime | None) -> datetime | None:
    """When a person's pause ends: None (paused, no end), `now + for_ms`, or `until` (aware, later than now)."""
    if for_ms is not None and until is not None:
        raise Invalid("Give either a length (for_ms) or an end (until), not both.")
    if for_ms is not None:
        if not isinstance(for_ms, int) or isinstance(for_ms, bool) or not 0 < for_ms <= MAX_PAUSE_MS:
            raise Invalid(f"for_ms must be a whole number of milliseconds from 1 to {MAX_PAUSE_MS}.")
        return now + timedelta(milliseconds=for_ms)
    if until is not None:
        if until.tzinfo is None:
            raise Invalid("until must carry its time zone (RFC 3339, e.g. 2026-01-01T07:00:00+01:00).")
        if until <= now:
            raise Invalid(f"until ({iso(until)}) is in the past; the node would wake at once. Give a later time.")
        if until - now > timedelta(milliseconds=MAX_PAUSE_MS):
            raise Invalid("until is more than a year away.")
        return until
    return None


def person_hold(now: datetime, wake_at: datetime | None) -> Hold:
    reason = f"paused by a person until {iso(wake_at)}" if wake_at else "paused by a person"
    return Hold(by=HeldBy.PERSON, reason=reason, at=iso(now), wake_at=iso(wake_at) if wake_at else None)


class Holds:
    def __init__(self, *, clock: Clock, timeline: Timeline) -> None:
        self.clock = clock
        self.timeline = timeline

    # -- time -----------------------------------------------------------------------------

    def wake_in_s(self, record: Supervised) -> float | None:
        """Seconds until a sleeping record's wake_at (never below 0); None when it has no end."""
        hold = record.hold
        if hold is None or hold.wake_at is None:
            return None
        since, until = parse_iso(hold.at), parse_iso(hold.wake_at)
        if since is None or until is None:
            return 0.0  # an unreadable time never keeps a node down forever
        length = max(0.0, (until - since).total_seconds())
        elapsed = self.timeline.since(("hold", record.id), hold.at) or 0.0
        return max(0.0, length - elapsed)

    def wake_at(self, record: Supervised) -> datetime | None:
        """When a sleeping record wakes, in wall time for views."""
        left = self.wake_in_s(record)
        if left is None:
            return None
        return self.clock.now() + timedelta(seconds=left)

    # -- transitions -----------------------------------------------------------------------

    def hold(self, lc: AnyLife, node_id: str, change: Change, status: Enum, hold: Hold) -> Supervised | None:
        """Write a hold (Change.PAUSE for a person, Change.HOLD for the node): no attempt, no notification.

        The node's own hold spends its start mark, as an answer does: it ran, and said what it wants.
        """
        def update(r: Supervised) -> Supervised:
            start = r.start
            if change is Change.HOLD and start is not None:
                start = dataclasses.replace(start, answered=True)
            changed: Supervised = r.replace(status=status, hold=hold, start=start)
            return changed

        held = lc.apply(node_id, change, update, detail=hold.reason)
        if held is not None:
            self.timeline.mark(("hold", node_id), hold.at)
            log.info("%s %s is %s: %s", lc.kind.noun, node_id, status.value, hold.reason)
        return held

    def release(self, lc: AnyLife, node_id: str, change: Change) -> Supervised | None:
        """Take a record off its hold (Change.WAKE, RESUME or RETRY): back to what its kind's Retry gives."""
        def update(r: Supervised) -> Supervised:
            released: Supervised = r.replace(hold=None, error=None, **lc.kind.retry(r, stamp(self.clock)))
            return released

        return lc.apply(node_id, change, update)
