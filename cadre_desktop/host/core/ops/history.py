"""Each node's history: when it was up, starting, down, paused or given up on, and its restarts.

The host keeps it, not the node: it is what the host saw. Every engine event about a
node re-reads the node's view and, when its state changed, appends one entry (a time
and the state from then on); a new start after the first is a restart mark. A host
that stops writes "none" for every node: while no host runs nothing is known, and a
gap is shown as a gap, not as up or down.

Bounded: entries older than `KEEP_S` (7 days) go, the last one before the cut kept
as the state the window starts in, and at most `MAX_ENTRIES` a node (a node that flaps
for a week keeps its latest). Written to one file, 0600 and atomic, at most every
`SAVE_DELAY_S` and at the host's stop, so a crash loses seconds, never the file.
A removed node's history goes with it. A history file that cannot be read is set
aside (`.broken`) with a warning and a new one begun: it explains, it decides nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from cadre_desktop.errors import NoSuchThing
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.host.core.clock import Clock
from cadre_desktop.host.core.events import LENDING_EVENTS, EventBus, EventKind, HostEvent
from cadre_desktop.host.core.ops.views import NodeView, NodeViews
from cadre_desktop.host.core.records.records import HELD, is_node_id
from cadre_desktop.jsontypes import JSONObject, JSONValue, loads
from cadre_desktop.text import one_line
from cadre_desktop.times import parse_time

log = logging.getLogger(__name__)

HISTORY_VERSION = 1
KEEP_S = 7 * 24 * 3600
MAX_ENTRIES = 2000
MAX_FILE_BYTES = 64 * 1024 * 1024
SAVE_DELAY_S = 2.0
#: The windows a history is told in: name, length in seconds.
WINDOWS = (("24h", 24 * 3600), ("7d", KEEP_S))


class HistoryState(StrEnum):
    UP = "up"
    STARTING = "starting"
    DOWN = "down"
    #: Held on purpose (paused, sleeping, done): counted neither for nor against uptime.
    PAUSED = "paused"
    GAVE_UP = "gave-up"
    #: No host was running: nothing is known.
    NONE = "none"


#: How a node came to this computer from another: a planned move, a failover.
ARRIVALS = frozenset({"moved", "failed_over"})
#: Neither up nor down: left out of the uptime percentage.
NOT_COUNTED = frozenset({HistoryState.PAUSED, HistoryState.NONE})
#: What a start may follow and be planned: a hold's end, a host's start (or the node's first
#: start, after nothing). Such a start is no restart and its start-up no down time; a start
#: after a crash (down) or a person's Restart (up) is a restart, its start-up part of the outage.
PLANNED = frozenset({HistoryState.PAUSED, HistoryState.NONE})


def state_of_view(view: NodeView) -> HistoryState:
    """What a view says of the node, in the history's words."""
    status = str(getattr(view.status, "value", view.status))
    if status == "error":
        return HistoryState.GAVE_UP
    if status in HELD:
        return HistoryState.PAUSED
    if view.running:
        return HistoryState.UP if view.ready else HistoryState.STARTING
    if status == "spawning":
        return HistoryState.STARTING
    return HistoryState.DOWN


@dataclass
class Track:
    """One node's history: (epoch seconds, the state from then on), its restarts, and the
    start it saw last (a re-attached child is no restart)."""

    entries: list[tuple[float, HistoryState]] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    last_start: str = ""
    #: When the node came to this computer from another: (epoch seconds, kind, words); kinds in `ARRIVALS`.
    arrivals: list[tuple[float, str, str]] = field(default_factory=list)
    #: The last entry is down from an exit with code 0 (a node that may be asking for its own
    #: hold): a hold right after it is the state from that exit on. Not kept in the file.
    clean_exit: bool = field(default=False, compare=False)
    #: The last entry is a down the last event's reading appended (a transition tells `changed`
    #: first, then its own event: a resume's or an exit's may amend it). Not kept in the file.
    fresh_down: bool = field(default=False, compare=False)

    def to_json(self) -> JSONObject:
        return {"entries": _kept_apart(self.entries), "starts": [round(t, 3) for t in self.starts],
                "last_start": self.last_start, "arrivals": [[round(t, 3), k, w] for t, k, w in self.arrivals]}

    @classmethod
    def from_json(cls, row: object) -> Track:
        if not isinstance(row, dict):
            raise ValueError("a node's history must be an object")
        entries = [(float(t), HistoryState(s)) for t, s in row.get("entries", [])]
        starts = [float(t) for t in row.get("starts", [])]
        last_start = row.get("last_start", "")
        if not isinstance(last_start, str):
            raise ValueError("last_start must be text")
        arrivals = [(float(t), k, one_line(str(w), 200)) for t, k, w in row.get("arrivals", [])[-MAX_ENTRIES:]
                    if k in ARRIVALS]
        return cls(entries, starts, last_start[:64], arrivals)

    def trim(self, now: float) -> None:
        """Keep the last `KEEP_S` (the entry before the cut starts the window) and at most
        `MAX_ENTRIES`."""
        cut = now - KEEP_S
        older = [i for i, (t, _) in enumerate(self.entries) if t <= cut]
        if older:
            first = older[-1]
            self.entries = [(cut, self.entries[first][1])] + self.entries[first + 1:]
        self.entries = self.entries[-MAX_ENTRIES:]
        self.starts = [t for t in self.starts if t > cut][-MAX_ENTRIES:]
        self.arrivals = [a for a in self.arrivals if a[0] > cut][-MAX_ENTRIES:]


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    state: HistoryState


@dataclass(frozen=True)
class Window:
    """A node's history over one window (the last 24 hours, the last 7 days)."""

    name: str
    start: float
    end: float
    spans: tuple[Span, ...]
    restarts: tuple[float, ...]
    #: Up time over the time that counts (not paused, not unknown); None when none counts.
    uptime_percent: float | None
    #: Arrivals from another computer in the window: (epoch seconds, kind, words).
    arrivals: tuple[tuple[float, str, str], ...] = ()

    def to_json(self) -> JSONObject:
        return {"name": self.name, "start": _iso(self.start), "end": _iso(self.end),
                "uptime_percent": self.uptime_percent, "restarts": len(self.restarts),
                "restart_times": [_iso(t) for t in self.restarts],
                "spans": [{"state": s.state.value, "start": _iso(s.start), "end": _iso(s.end)} for s in self.spans],
                "arrivals": [{"at": _iso(t), "kind": k, "words": w} for t, k, w in self.arrivals]}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def spans_of(entries: list[tuple[float, HistoryState]], start: float, end: float) -> list[Span]:
    """The states between `start` and `end`; before the first entry nothing is known."""
    out: list[Span] = []
    for i, (t, state) in enumerate(entries):
        until = entries[i + 1][0] if i + 1 < len(entries) else end
        a, b = max(t, start), min(until, end)
        if b > a:
            if out and out[-1].state is state and out[-1].end == a:
                out[-1] = Span(out[-1].start, b, state)
            else:
                out.append(Span(a, b, state))
    return out


def window_of(track: Track, name: str, length: float, now: float) -> Window:
    start = now - length
    spans = spans_of(track.entries, start, now)
    return Window(name, start, now, tuple(spans), tuple(t for t in track.starts if start <= t <= now),
                  uptime_of(track.entries, start, now), tuple(a for a in track.arrivals if start <= a[0] <= now))


def uptime_of(entries: list[tuple[float, HistoryState]], start: float, end: float) -> float | None:
    """Up time over the time that counts between `start` and `end` (None: none counts). Not
    counted: holds, no host, and a planned start's start-up (`PLANNED`), judged on the whole
    history so a window's cut does not change what a start followed."""
    counted = up = 0.0
    before: HistoryState | None = None
    for i, (t, state) in enumerate(entries):
        until = entries[i + 1][0] if i + 1 < len(entries) else end
        length = max(0.0, min(until, end) - max(t, start))
        planned = state is HistoryState.STARTING and (before is None or before in PLANNED)
        if state not in NOT_COUNTED and not planned:
            counted += length
            up += length if state is HistoryState.UP else 0.0
        before = state
    return round(100.0 * up / counted, 2) if counted > 0 else None


class NodeHistory:
    """The history of every hosted node, fed by the engine's events (`on_event`)."""

    def __init__(self, path: Path, clock: Clock, view_of: Callable[[str], NodeView | None],
                 writer: GroupWriter | None = None) -> None:
        self.path, self.clock, self._view_of = path, clock, view_of
        #: The host's writer thread, where a save made by `save_soon` is written (its fsync off the loop).
        self._writer = writer
        self._tracks: dict[str, Track] = {}
        self._save_handle: asyncio.TimerHandle | None = None

    def now(self) -> float:
        return self.clock.now().timestamp()

    # -- the file ----------------------------------------------------------------------------

    def load(self) -> None:
        try:
            raw = read_bytes(self.path, max_bytes=MAX_FILE_BYTES)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read the node history %s (%s); starting a new one", self.path, exc)
            return
        try:
            doc = loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != HISTORY_VERSION:
                raise ValueError(f"not a version {HISTORY_VERSION} history")
            nodes = doc.get("nodes")
            if not isinstance(nodes, dict):
                raise ValueError("no 'nodes' object")
            self._tracks = {k: Track.from_json(v) for k, v in nodes.items() if is_node_id(k)}
        except (ValueError, TypeError, RecursionError) as exc:
            aside = self.path.with_name(self.path.name + ".broken")
            log.warning("the node history %s is unreadable (%s); kept as %s, a new one begun", self.path, exc, aside)
            self._tracks = {}
            try:
                self.path.replace(aside)
            except OSError:
                pass

    def save(self) -> None:
        """Write every node's history now (atomically, 0600)."""
        self._writing()()

    def _writing(self) -> Callable[[], None]:
        """The write of every node's history as it is now (the document made here, written by the call)."""
        self._cancel_save()
        now = self.now()
        for track in self._tracks.values():
            track.trim(now)
        doc = {"version": HISTORY_VERSION, "nodes": {k: t.to_json() for k, t in self._tracks.items()}}
        path = self.path

        def write() -> None:
            try:
                write_json_atomic(path, doc, compact=True)
            except OSError as exc:  # the history explains; a full disk must not stop supervision
                log.warning("cannot write the node history %s: %s", path, exc)
        return write

    def _save_behind(self) -> None:
        """`save_soon`'s write: on the host's writer thread (a storm's history is no fsync on the
        loop), else here; a writer closing (the host stopping) writes here too."""
        write = self._writing()
        if self._writer is not None:
            try:
                self._writer.submit(self.path, write)
                return
            except RuntimeError:
                pass
        write()

    def save_soon(self) -> None:
        """One write for the changes of the next `SAVE_DELAY_S` (a start of thirty nodes is one)."""
        if self._save_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): written at the next save
            return
        self._save_handle = loop.call_later(SAVE_DELAY_S, self._save_behind)

    def _cancel_save(self) -> None:
        if self._save_handle is not None:
            self._save_handle.cancel()
            self._save_handle = None

    # -- what happens ---------------------------------------------------------------------------

    def on_event(self, event: HostEvent) -> None:
        if not event.node_id or event.kind in LENDING_EVENTS:
            return
        if event.kind is EventKind.REMOVED:
            self.forget(event.node_id)
        elif event.kind is EventKind.EXITED:
            self.went_down(event.node_id)
        elif event.kind is EventKind.RESUMED:
            self.released(event.node_id)
        elif event.kind in (EventKind.FAILED_OVER, EventKind.MOVED):
            self.arrived(event.node_id, event.kind.value, event.detail)
        else:
            self.observe(event.node_id)

    def arrived(self, node_id: str, kind: str, words: str) -> None:
        """The node came here from another computer (a failover, a move): a mark with its words."""
        track = self._tracks.setdefault(node_id, Track())
        now = self.now()
        track.arrivals.append((now, kind if kind in ARRIVALS else "moved", one_line(words, 200)))
        track.trim(now)
        self.save_soon()
        self.observe(node_id)

    def released(self, node_id: str) -> None:
        """A hold ended (a resume, a wake): the down its own `changed` read (the child not started
        yet) is no down, the node stays held until its start; a start that then fails is down."""
        track = self._tracks.get(node_id)
        if track is not None and track.fresh_down and len(track.entries) >= 2 and track.entries[-2][1] in PLANNED:
            track.entries.pop()
            self.save_soon()
        self.observe(node_id, released=True)

    def went_down(self, node_id: str) -> None:
        """A child of the node ended on its own: down from now, whatever its view says by now.

        An event is told after the writes asked before it are synced, and meanwhile the pass
        may have started the next child: read then, the view already says starting, and a
        crash answered within milliseconds would leave no trace. The next event reads the
        view again (starting, up), so the crash is a short down span and a restart.
        """
        view = self._view_of(node_id)
        if view is None:
            return
        track = self._tracks.setdefault(node_id, Track())
        clean = getattr(view, "exit_code", None) == 0
        if not track.entries or track.entries[-1][1] is not HistoryState.DOWN:
            now = self.now()
            track.entries.append((now, HistoryState.DOWN))
            track.clean_exit = clean
            track.trim(now)
            self.save_soon()
        elif track.fresh_down:  # the exit's own `changed` read it down just now
            track.clean_exit = clean
        track.fresh_down = False

    def observe(self, node_id: str, released: bool = False) -> None:
        """Re-read the node: one entry when its state changed, a mark when it started again
        (not after a planned state, `PLANNED`). A node just `released` from a hold, or seen first
        by a host that just started, is not down while its child is not started yet: it stays
        held (or unknown) until that start."""
        view = self._view_of(node_id)
        if view is None:
            return
        track = self._tracks.setdefault(node_id, Track())
        now, state, changed = self.now(), state_of_view(view), False
        before = track.entries[-1][1] if track.entries else None
        track.fresh_down = False
        if released and state is HistoryState.DOWN and before in PLANNED:
            return
        if state is HistoryState.PAUSED and before is HistoryState.DOWN and track.clean_exit:
            track.entries[-1] = (track.entries[-1][0], state)  # a node's own hold: held from its exit 0 on
            before = state
            changed = True
        if state is not HistoryState.DOWN:
            track.clean_exit = False
        if before is not state:
            track.entries.append((now, state))
            track.fresh_down, changed = state is HistoryState.DOWN, True
        started = view.started_at if view.running else None
        if started and started != track.last_start:
            if track.last_start and before not in PLANNED:
                track.starts.append(_stamp(started, now))
            track.last_start, changed = started, True
        if changed:
            track.trim(now)
            self.save_soon()

    def forget(self, node_id: str) -> None:
        if self._tracks.pop(node_id, None) is not None:
            self.save_soon()

    def host_stopped(self) -> None:
        """From now on nothing is known until a host runs again; written at once."""
        now = self.now()
        for track in self._tracks.values():
            if track.entries and track.entries[-1][1] is not HistoryState.NONE:
                track.entries.append((now, HistoryState.NONE))
        self.save()

    # -- what is asked -------------------------------------------------------------------------

    def windows(self, node_id: str) -> list[Window]:
        track = self._tracks.get(node_id) or Track()
        now = self.now()
        return [window_of(track, name, length, now) for name, length in WINDOWS]

    def to_json(self, node_id: str) -> JSONObject:
        return {"node_id": node_id, "now": _iso(self.now()), "windows": [w.to_json() for w in self.windows(node_id)]}

    def entry_count(self, node_id: str) -> int:
        track = self._tracks.get(node_id)
        return len(track.entries) + len(track.starts) if track else 0


def _kept_apart(entries: list[tuple[float, HistoryState]]) -> list[JSONValue]:
    """The entries to the millisecond, each at least one after the one before it: a crash
    answered within a millisecond (its down entry and the next start's a few microseconds
    apart) stays a down span when the file is read back, not one of no length, which no
    view shows."""
    out: list[JSONValue] = []
    last: float | None = None
    for t, state in entries:
        at = round(t, 3)
        if last is not None and at <= last:
            at = round(last + 0.001, 3)
        out.append([at, state.value])
        last = at
    return out


def _stamp(iso_time: str, default: float) -> float:
    when = parse_time(iso_time, zone="utc")
    return default if when is None else when.timestamp()


def start_history(path: Path, clock: Clock, views: NodeViews, events: EventBus, node_ids: list[str],
                  writer: GroupWriter | None = None) -> NodeHistory:
    """Each node's history: read, then fed by every engine event from now on."""
    def view_of(node_id: str) -> NodeView | None:
        try:
            return views.get(node_id)
        except NoSuchThing:
            return None
    history = NodeHistory(path, clock, view_of, writer)
    history.load()
    events.subscribe(history.on_event)
    for node_id in node_ids:
        history.observe(node_id, released=True)  # a node stopped at the last Quit is not down until started
    return history
