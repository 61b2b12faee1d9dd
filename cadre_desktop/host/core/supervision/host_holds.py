"""The host's holds: Pause all, and what the run conditions say, as the hold each node should have.

A person pauses every node at once (the tray's *Pause all*, `cadre-desktop pause`,
`POST /api/host/pause`): for a while, until a time, or until they resume. The pause is
kept in `host-pause.json` (versioned, 0600), so it survives a restart of the host. The run
conditions (`host/conditions/`, on battery, in use, metered, the schedule) say stop or run
through a `ConditionsVerdict` they hand in; this room imports nothing of theirs.

Neither acts on a node: `wanted(record, kind)` is the hold the host wants the node to have
now, which the supervisor's `Observer` puts in the `Observation` and `decide()` judges
(`HOST_HOLD`, `HOST_RELEASE`), on the serial queue. Such a hold has `scope: "host"`: a
node a person paused on its own, or one the node held itself, is never released by the end
of the host's pause or of a condition. Pause all holds every node, `always_run` ones too;
the conditions pass over a node with `always_run`. A person's Resume (of all, or of one
node) overrides the conditions until the next change of one of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Protocol

from cadre_desktop.errors import StorageError
from cadre_desktop.files.atomicfile import write_bytes_atomic
from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.host.core.clock import Clock, iso, parse_iso, stamp
from cadre_desktop.host.core.records.lifecycle import RecordKind, Supervised
from cadre_desktop.host.core.records.records import HeldBy, Hold
from cadre_desktop.host.core.supervision.holds import pause_end
from cadre_desktop.jsontypes import JSONObject, loads

log = logging.getLogger(__name__)

PAUSE_VERSION = 1
#: The words of a node held by Pause all.
PAUSE_REASON = "paused from the tray (Pause all)"


@dataclass(frozen=True)
class HostPause:
    """Pause all: since when, until when (None: until a person resumes)."""

    at: datetime
    until: datetime | None = None

    def active(self, now: datetime) -> bool:
        return self.until is None or now < self.until

    @property
    def reason(self) -> str:
        return PAUSE_REASON

    def to_json(self, now: datetime, left_s: float | None = None) -> JSONObject:
        """As the front ends show it; `left_s`, when known, is what is left on the monotonic clock."""
        if self.until is not None and left_s is None:
            left_s = (self.until - now).total_seconds()
        left = None if left_s is None else max(0, int(left_s * 1000))
        return {"paused": self.active(now) if left is None else left > 0, "since": iso(self.at),
                "until": iso(self.until) if self.until else None, "left_ms": left, "reason": self.reason}


@dataclass(frozen=True)
class ConditionsVerdict:
    """What the run conditions say now: stop (`reason` in one line, `until` when it is known), or
    run (None in its place). `since` keeps a hold's words the same between passes."""

    reason: str
    until: datetime | None = None


class Conditions(Protocol):
    """The run conditions' judge as the host's holds see it."""

    def verdict(self) -> ConditionsVerdict | None: ...


def load_pause(path: Path) -> HostPause | None:
    """The pause `host-pause.json` keeps; a missing file is no pause; a broken one is a StorageError."""
    try:
        raw = read_bytes(path, max_bytes=4096)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"{path} cannot be read: {exc}") from exc
    try:
        doc = loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != PAUSE_VERSION:
            raise ValueError(f"version must be {PAUSE_VERSION}")
        if doc.get("paused") is not True:
            return None
        at = parse_iso(doc.get("since"))
        until = parse_iso(doc["until"]) if doc.get("until") is not None else None
        if at is None or (doc.get("until") is not None and until is None):
            raise ValueError("since and until must be times")
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"{path} is not a pause this host wrote ({exc}); fix or delete it") from exc
    return HostPause(at=at, until=until)


def save_pause(path: Path, pause: HostPause | None) -> None:
    doc: JSONObject = {"version": PAUSE_VERSION, "paused": pause is not None}
    if pause is not None:
        doc.update(since=iso(pause.at), until=iso(pause.until) if pause.until else None)
    write_bytes_atomic(path, (json.dumps(doc, indent=2) + "\n").encode())


class HostHolds:
    """The hold each node should have now: Pause all's, else its conditions', else none."""

    def __init__(self, path: Path, clock: Clock, kick: Callable[[str], object] = lambda _why: None) -> None:
        self.path = path
        self.clock = clock
        #: Asks the supervisor for a pass (a pause began or ended, a condition changed).
        self.kick = kick
        self.pause: HostPause | None = None
        self.conditions: Conditions | None = None
        #: Nodes a person resumed while the conditions held them: run until the next change.
        self._resumed: set[str] = set()
        #: A person resumed everything: the conditions hold nobody until their next change.
        self._resumed_all = False
        self._timer: asyncio.Task[None] | None = None
        #: Where the pause ends on the monotonic clock: its length counts while the host runs, so
        #: a step of the wall clock neither keeps every node asleep nor wakes them early.
        self._ends_mono: float | None = None

    def load(self) -> None:
        """Read the pause a last host left (an ended one is forgotten): across a restart, its end is the wall clock's."""
        pause = load_pause(self.path)
        if pause is not None and not pause.active(self.clock.now()):
            pause = None
        self._set(pause)
        if pause is not None:
            log.info("every node stays paused (%s)", f"until {iso(pause.until)}" if pause.until else "until resumed")

    def start(self) -> None:
        self._arm()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None

    # -- a person's word ---------------------------------------------------------------

    def pause_all(self, for_ms: int | None = None, until: datetime | None = None) -> HostPause:
        """Hold every node (checked as a node's pause is: a time in the past is one clear error)."""
        now = self.clock.now()
        end = pause_end(now, for_ms, until)
        pause = HostPause(at=now, until=end)
        save_pause(self.path, pause)
        self._set(pause)
        self._resumed.clear()
        log.info("every node paused %s", f"until {iso(end)}" if end else "until resumed")
        self._arm()
        self.kick("pause all")
        return pause

    def resume_all(self) -> None:
        """End Pause all, and let every node run whatever the conditions say until their next change."""
        if self.pause is not None:
            save_pause(self.path, None)
        self._set(None)
        self._resumed.clear()
        self._resumed_all = True
        log.info("every node resumed")
        self._arm()
        self.kick("resume all")

    def resumed(self, node_id: str) -> None:
        """A person resumed this node: it runs until the next change of a condition (or of the pause)."""
        self._resumed.add(node_id)

    def resumed_words(self) -> str | None:
        """A person's Resume that overrides the conditions now, in words (None: none)."""
        if self._resumed_all:
            return "every node (Resume), until a condition changes"
        if self._resumed:
            return f"{len(self._resumed)} node(s) (Resume), until a condition changes"
        return None

    def conditions_changed(self) -> None:
        """A condition changed: a person's Resume is spent."""
        self._resumed.clear()
        self._resumed_all = False
        self.kick("conditions")

    def paused(self) -> HostPause | None:
        """Pause all, while it lasts (its end on the monotonic clock)."""
        pause = self.pause
        if pause is not None and (left := self._left_s()) is not None and left <= 0:
            self._ended()
            return None
        return pause

    def state_json(self) -> JSONObject:
        """Pause all as the front ends show it: {"paused": false}, or since, until, left_ms and reason."""
        pause = self.paused()
        return pause.to_json(self.clock.now(), self._left_s()) if pause else {"paused": False}

    def _set(self, pause: HostPause | None) -> None:
        self.pause = pause
        self._ends_mono = None
        if pause is not None and pause.until is not None:
            self._ends_mono = self.clock.monotonic() + (pause.until - self.clock.now()).total_seconds()

    def _left_s(self) -> float | None:
        """Seconds left of a pause with an end (None: no pause, or no end)."""
        return None if self._ends_mono is None else self._ends_mono - self.clock.monotonic()

    def _ended(self) -> None:
        self._set(None)
        try:
            save_pause(self.path, None)
        except OSError as exc:  # an ended pause in the file is forgotten at the next start anyway
            log.warning("the end of the pause could not be written: %s", exc)
        log.info("the pause has ended; every node runs again")

    def _arm(self) -> None:
        """A pass at the moment the pause ends."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._ends_mono is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = asyncio.ensure_future(self._end_at(self._ends_mono))

    async def _end_at(self, deadline: float) -> None:
        left = deadline - self.clock.monotonic()
        if left > 0:
            await self.clock.sleep(left)
        self._timer = None
        self.paused()
        self.kick("pause ended")

    # -- what each node should have ----------------------------------------------------------

    def wanted(self, record: Supervised, kind: RecordKind) -> tuple[Enum, Hold] | None:
        """The hold the host wants this node to have now (status and hold), else None."""
        holds = kind.holds
        if "paused" not in holds or "sleeping" not in holds:
            return None
        pause = self.paused()
        if pause is not None and record.id not in self._resumed:
            return holds["sleeping" if pause.until else "paused"], Hold(
                by=HeldBy.PERSON, reason=pause.reason, at=iso(pause.at),
                wake_at=iso(pause.until) if pause.until else None, scope="host")
        if getattr(record, "always_run", False) or self._resumed_all or record.id in self._resumed:
            return None
        verdict = self.conditions.verdict() if self.conditions is not None else None
        if verdict is None:
            return None
        return holds["sleeping" if verdict.until else "paused"], Hold(
            by=HeldBy.CONDITIONS, reason=verdict.reason, at=stamp(self.clock),
            wake_at=iso(verdict.until) if verdict.until else None, scope="host")
