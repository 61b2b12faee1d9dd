"""The judge: readings and the schedule, with the settings, into one answer: run, or hold (why, until when).

* A condition that is off in the settings, or that reads unknown here, never stops a node.
* On battery (`pause_on_battery`), in use (`pause_when_in_use`), on a metered network
  (`pause_on_metered_network`) and outside the schedule (`run_schedule`) each hold every node
  but those with `always_run`; their reasons are said together in one line ("on battery, on a
  metered network"), with an end only when the schedule alone holds ("outside the schedule
  until Mon 22:00").
* Debounced: a change between run and hold is taken at most once per `DEBOUNCE_S` (a node is
  not stopped and started more than once a minute by a flapping source); a change back inside
  it cancels the pending one. A person's change of the settings is taken at once. A new reason for a hold already taken is taken at once (nothing
  starts or stops for it).
* Every change taken is told (`on_change`): the host's holds (`host/core/supervision/host_holds.py`)
  spend a person's Resume and ask the supervisor for a pass, which holds or releases nodes on
  its serial queue. The judge itself acts on no node.

Time is the injected clock's: the debounce on its monotonic time, the schedule on its wall time,
looked at again at each change of the schedule and at least every `RECHECK_S` (a clock or
time zone that changed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from typing import NotRequired, TypedDict

from cadre_desktop.host.conditions.schedule import Schedule, local_zone
from cadre_desktop.host.conditions.source import ConditionSource, Reading
from cadre_desktop.host.core.clock import Clock, iso
from cadre_desktop.host.core.supervision.host_holds import ConditionsVerdict
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)

DEBOUNCE_S = 60.0
RECHECK_S = 900.0


@dataclass(frozen=True)
class Condition:
    """One condition a source reads: its key, its setting, and its words when it holds."""

    name: str
    setting: str
    holds_words: str
    clear_words: str


CONDITIONS = (
    Condition("on_battery", "pause_on_battery", "on battery", "on mains power"),
    Condition("in_use", "pause_when_in_use", "the computer is in use", "the computer is idle"),
    Condition("metered", "pause_on_metered_network", "on a metered network", "not on a metered network"),
)
NO_SOURCE = Reading(None, "no source on this computer", "")


class ConditionRow(TypedDict):
    """One condition in `Judge.report`, in this key order (the schedule's with its `next_change`)."""

    name: str
    setting: str
    enabled: bool
    value: bool | None
    sees: str
    source: str
    detail: str
    does: str
    next_change: NotRequired[str | None]


class VerdictRow(TypedDict):
    run: bool
    reason: str | None
    until: str | None


class ConditionsReport(TypedDict):
    """`Judge.report`: what `cadre-desktop conditions` and `GET /api/host/conditions` show."""

    conditions: list[ConditionRow]
    verdict: VerdictRow
    pending_s: float | None


class Judge:
    def __init__(self, settings: Settings, clock: Clock, sources: Sequence[ConditionSource],
                 on_change: Callable[[], object] = lambda: None, zone: Callable[[], tzinfo] = local_zone,
                 make_sources: Callable[[Settings], Sequence[ConditionSource]] | None = None) -> None:
        self.clock = clock
        self.sources = {s.name: s for s in sources}
        #: Makes the sources again when the settings turn a condition on or off (None: they stay).
        self.make_sources = make_sources
        self._swapping: asyncio.Task[None] | None = None
        self.on_change = on_change
        self._zone = zone
        self.settings = settings
        self.schedule = Schedule(settings.run_schedule, zone) if settings.run_schedule else None
        #: The verdict taken (what the host's holds see), and when it last went between run and hold.
        self.taken: ConditionsVerdict | None = None
        self._flipped_at: float | None = None
        #: A change waiting for the debounce: due at this monotonic time.
        self.pending_at: float | None = None
        self._timer: asyncio.Task[None] | None = None
        self._started = False

    # -- life ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start each source (each says unknown rather than fail), then take the first verdict."""
        for source in self.sources.values():
            try:
                await source.start(self._heard)
            except Exception:  # a source must never stop the host; it reads unknown
                log.exception("the %s condition source could not start; it reads unknown", source.name)
        self._started = True
        self.evaluate()

    async def stop(self) -> None:
        self._started = False
        self._cancel_timer()
        if self._swapping is not None:
            self._swapping.cancel()
            await asyncio.gather(self._swapping, return_exceptions=True)
        for source in self.sources.values():
            try:
                await source.stop()
            except Exception:  # stopping must reach every source; this one is left to the process's end
                log.exception("the %s condition source did not stop cleanly", source.name)

    def use_settings(self, settings: Settings) -> None:
        """New settings (Preferences): judged again and taken at once, a person's word and not a
        flapping source's, so no debounce (a schedule removed starts the nodes now); a condition
        turned on or off (or a new idle threshold) gets its sources made again, in the background."""
        before = _source_keys(self.settings)
        self.settings = settings
        self.schedule = Schedule(settings.run_schedule, self._zone) if settings.run_schedule else None
        if self.make_sources is not None and self._started and _source_keys(settings) != before:
            self._swapping = asyncio.get_running_loop().create_task(self._swap_sources(settings), name="conditions")
        self.evaluate(by_person=True)

    async def _swap_sources(self, settings: Settings) -> None:
        assert self.make_sources is not None
        old, self.sources = list(self.sources.values()), {}
        for source in old:
            try:
                await source.stop()
            except Exception:  # stopping must reach every source
                log.exception("the %s condition source did not stop cleanly", source.name)
        self.sources = {s.name: s for s in self.make_sources(settings)}
        for source in self.sources.values():
            try:
                await source.start(self._heard)
            except Exception:  # a source must never stop the host; it reads unknown
                log.exception("the %s condition source could not start; it reads unknown", source.name)
        self.evaluate(by_person=True)  # what the person's change turned on reads now

    def _heard(self, reading: Reading) -> None:
        self.evaluate()

    # -- judging ------------------------------------------------------------------------

    def reading(self, name: str) -> Reading:
        source = self.sources.get(name)
        if source is None:
            return NO_SOURCE
        try:
            return source.reading()
        except Exception as exc:  # a source that breaks reads unknown
            log.debug("the %s condition source failed to read: %s", name, exc)
            return Reading(None, getattr(source, "name", name), f"it failed: {exc}")

    def now_says(self) -> ConditionsVerdict | None:
        """What the conditions say this instant, before the debounce."""
        reasons = [c.holds_words for c in CONDITIONS
                   if getattr(self.settings, c.setting) and self.reading(c.name).value is True]
        until = None
        if self.schedule is not None:
            moment = self.schedule.at(self.clock.now())
            if not moment.inside:
                words = "outside the schedule"
                if moment.next_change is not None:
                    words += f" until {self.schedule.words(moment.next_change)}"
                    until = moment.next_change if not reasons else None
                reasons.append(words)
        if not reasons:
            return None
        return ConditionsVerdict(", ".join(reasons), until)

    def verdict(self) -> ConditionsVerdict | None:
        """The verdict taken: what the host's holds follow."""
        return self.taken

    def evaluate(self, *, by_person: bool = False) -> None:
        """Judge now; take the change at once, or when the debounce allows (`by_person`: a person's
        change of the settings, taken at once); arm the next look."""
        if not self._started:
            return
        says = self.now_says()
        mono = self.clock.monotonic()
        self.pending_at = None
        if says != self.taken:
            flip = (says is None) != (self.taken is None)
            if flip and not by_person and self._flipped_at is not None and mono - self._flipped_at < DEBOUNCE_S:
                self.pending_at = self._flipped_at + DEBOUNCE_S
                log.info("run conditions: %s, taken in %.0f s (debounced)", _words(says),
                         self.pending_at - mono)
            else:
                if flip:
                    self._flipped_at = mono
                self.taken = says
                log.info("run conditions: %s", _words(says))
                self.on_change()
        self._arm(mono)

    def _arm(self, mono: float) -> None:
        wait = RECHECK_S
        if self.pending_at is not None:
            wait = min(wait, self.pending_at - mono)
        if self.schedule is not None:
            change = self.schedule.at(self.clock.now()).next_change
            if change is not None:
                wait = min(wait, (change - self.clock.now()).total_seconds() + 0.5)
        self._cancel_timer()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = asyncio.ensure_future(self._look_at(mono + max(0.0, wait)))

    async def _look_at(self, deadline: float) -> None:
        left = deadline - self.clock.monotonic()
        if left > 0:
            await self.clock.sleep(left)
        self._timer = None
        self.evaluate()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    # -- words --------------------------------------------------------------------------

    def report(self) -> ConditionsReport:
        """Each condition: what it sees, where from, what it does; and the verdict (`GET /api/host/conditions`)."""
        rows = [self._row(c) for c in CONDITIONS]
        rows.append(self._schedule_row())
        taken = self.taken
        return {
            "conditions": rows,
            "verdict": {"run": taken is None, "reason": taken.reason if taken else None,
                        "until": iso(taken.until) if taken and taken.until else None},
            "pending_s": None if self.pending_at is None else max(0.0, self.pending_at - self.clock.monotonic()),
        }

    def _row(self, c: Condition) -> ConditionRow:
        reading = self.reading(c.name)
        on = bool(getattr(self.settings, c.setting))
        sees = "unknown" if reading.value is None else (c.holds_words if reading.value else c.clear_words)
        if not on:
            does = f"nothing ({c.setting} is off)"
        elif reading.value is None:
            does = "nothing (unknown never stops a node)"
        else:
            does = "holds the nodes" if reading.value else "lets the nodes run"
        return {"name": c.name, "setting": c.setting, "enabled": on, "value": reading.value, "sees": sees,
                "source": reading.source, "detail": reading.detail, "does": does}

    def _schedule_row(self) -> ConditionRow:
        if self.schedule is None:
            return {"name": "schedule", "setting": "run_schedule", "enabled": False, "value": None,
                    "sees": "no schedule: always", "source": "settings.json",
                    "detail": "", "does": "nothing (run_schedule is null)"}
        moment = self.schedule.at(self.clock.now())
        sees = "inside the schedule" if moment.inside else "outside the schedule"
        if moment.next_change is not None:
            sees += f" until {self.schedule.words(moment.next_change)}"
        return {"name": "schedule", "setting": "run_schedule", "enabled": True, "value": not moment.inside,
                "sees": sees,
                "source": f"the clock, in {self.schedule.zone_words()}",
                "detail": f"{len(self.schedule.windows)} window(s)",
                "does": "lets the nodes run" if moment.inside else "holds the nodes",
                "next_change": iso(moment.next_change) if moment.next_change else None}


def _source_keys(settings: Settings) -> tuple[object, ...]:
    """What the sources are made from: which conditions are on, and the idle threshold."""
    return tuple(getattr(settings, c.setting, None) for c in CONDITIONS) + (settings.in_use_idle_minutes,)


def platform_sources(settings: Settings) -> list[ConditionSource]:
    """This platform's sources for the conditions that are on (`platform.make_sources`); one that
    cannot be made reads unknown, and never stops a node. Imported here, at the host's start:
    the D-Bus and OS code loads only in a host that judges."""
    from cadre_desktop.host.conditions.platform import make_sources

    try:
        return list(make_sources(settings))
    except Exception:  # a source that cannot be made reads unknown; the host runs on
        log.exception("the run condition sources could not be made; they read unknown")
        return []


def _words(verdict: ConditionsVerdict | None) -> str:
    return "nodes may run" if verdict is None else f"nodes held ({verdict.reason})"
