"""What a node's state means to a person: words, colours and the tray's aggregate state.

Pure functions over `NodeView`s and a `now`, so the tray, the menu, the table and
the tests all say the same thing. No Qt here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum

from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.host.core.ops.views import NodeView, SupervisedView
from cadre_desktop.host.core.records.records import SUPERVISED, NodeStatus
from cadre_desktop.host.lending.donations import DonationStatus

#: What a hosted or a lent node the host gave up on shows; only Retry brings it back.
GAVE_UP = (NodeStatus.ERROR, DonationStatus.ERROR)


class TrayState(str, Enum):
    """The tray icon's picture; members are in rising order of urgency."""

    EMPTY = "empty"
    #: Every node paused by a person (Pause all): grey, whatever the nodes show, unless one needs the person.
    PAUSED = "paused"
    JOINED = "joined"
    UNCLAIMED = "unclaimed"
    BUSY = "busy"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return list(TrayState).index(self)


#: Status colours for the table (readable on light and dark backgrounds).
COLOURS = {
    TrayState.EMPTY: "#8a8f98",
    TrayState.PAUSED: "#8a8f98",
    TrayState.JOINED: "#2e9e44",
    TrayState.UNCLAIMED: "#2f6fd6",
    TrayState.BUSY: "#d08a00",
    TrayState.ERROR: "#d93025",
}

#: A held node's own dot (kept down on purpose, not a failure, not running): grey when paused,
#: blue-grey while it sleeps until its wake, a darker grey once done. Never a joined node's green.
HELD_COLOURS = {
    NodeStatus.PAUSED: "#8a8f98",
    NodeStatus.SLEEPING: "#7a8cc2",
    NodeStatus.DONE: "#5f6670",
}

SUMMARY = {
    TrayState.EMPTY: "no nodes yet",
    TrayState.PAUSED: "every node is paused",
    TrayState.JOINED: "all nodes joined",
    TrayState.UNCLAIMED: "waiting to be claimed",
    TrayState.BUSY: "starting or restarting",
    TrayState.ERROR: "a node needs attention",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


def seconds_until(stamp: str | None, now: datetime) -> int | None:
    when = parse_iso(stamp)
    if when is None:
        return None
    return max(0, int((when - now).total_seconds() + 0.999))


def is_down(view: NodeView) -> bool:
    """A supervised node whose child is not running: the supervisor is bringing it back."""
    return view.status in SUPERVISED and not view.running


def is_starting(view: NodeView) -> bool:
    """Running, but it has not answered its first status probe (so it cannot be claimed yet)."""
    return view.status in SUPERVISED and view.running and not view.ready


def gave_up(view) -> bool:
    """The host gave up on this node, hosted or lent: it waits for Retry."""
    return view.status in GAVE_UP


#: Where a node is, as a person sees it: the one reading of a view's status, running and ready
#: flags (`phase`, first match wins). The table's words, the details pane's and the tray's state
#: all say it from here, so they never disagree about a node. OTHER is a status with no words
#: of its own, shown as the status itself. Never stored nor sent.
Phase = Enum("Phase", "GAVE_UP DOWN STARTING UNCLAIMED JOINING JOINED OTHER")


def phase(view: NodeView) -> Phase:
    if view.status == NodeStatus.ERROR:
        return Phase.GAVE_UP
    if is_down(view):
        return Phase.DOWN
    if view.status == NodeStatus.SPAWNING or is_starting(view):
        return Phase.STARTING
    if view.status == NodeStatus.UNCLAIMED:
        return Phase.UNCLAIMED
    if view.status == NodeStatus.JOINING:
        return Phase.JOINING
    if view.status == NodeStatus.JOINED:
        return Phase.JOINED
    return Phase.OTHER


_TRAY_STATES = {
    Phase.GAVE_UP: TrayState.ERROR,
    Phase.DOWN: TrayState.BUSY,
    Phase.STARTING: TrayState.BUSY,
    Phase.JOINING: TrayState.BUSY,
    Phase.UNCLAIMED: TrayState.UNCLAIMED,
}


def node_state(view: NodeView) -> TrayState:
    return _TRAY_STATES.get(phase(view), TrayState.JOINED)


def node_colour(view: NodeView) -> str:
    """The table's colour of a node: its hold's own when held, else its state's."""
    return HELD_COLOURS.get(view.status) or COLOURS[node_state(view)]


def aggregate(views: Iterable[NodeView]) -> TrayState:
    """The worst state across nodes: error > busy > unclaimed > joined > no nodes."""
    return max((node_state(v) for v in views), key=lambda s: s.rank, default=TrayState.EMPTY)


@dataclass(frozen=True)
class PhaseWords:
    """One way of saying each phase (the table's, the details pane's); `say` is the one place
    that fills in the countdown, the attempt and the cadre."""

    fixed: dict[Phase, str]
    #: Down, with `{left}` seconds to its restart and `{attempt}`, the attempt it will be.
    restarting_in: str
    restarting_now: str
    #: Joined, with the `{cadre}`'s name when known.
    joined: str
    joined_unnamed: str

    def say(self, view: NodeView, now: datetime) -> str:
        at = phase(view)
        if at is Phase.DOWN:
            left = seconds_until(view.next_retry_at, now)
            return self.restarting_in.format(left=left, attempt=view.attempts + 1) if left else self.restarting_now
        if at is Phase.JOINED:
            return self.joined.format(cadre=view.cadre) if view.cadre else self.joined_unnamed
        return self.fixed.get(at) or view.status.capitalize()


TABLE_WORDS = PhaseWords(
    {Phase.GAVE_UP: "Error", Phase.STARTING: "Starting…", Phase.UNCLAIMED: "Waiting to be claimed",
     Phase.JOINING: "Joining…"},
    restarting_in="Restarting in {left} s", restarting_now="Restarting…",
    joined="Joined {cadre}", joined_unnamed="Joined",
)


def status_words(view: NodeView, now: datetime) -> str:
    """The table's words: short."""
    return TABLE_WORDS.say(view, now)


def retry_words(view: NodeView, now: datetime) -> str:
    """The attempts column: how many respawns in a row (0 too); the countdown is the status's."""
    return str(view.attempts)


def needs_attention(view: NodeView) -> bool:
    """The host gave up on it, or it waits for something only the person can give (the keyring)."""
    return gave_up(view) or bool(getattr(view, "waiting_for", None))


def menu_words(view: NodeView) -> str:
    """Status words without a running countdown: the tray menu changes only when the state does."""
    if getattr(view, "waiting_for", None):
        return f"Waiting for the {view.waiting_for}"
    return "Restarting…" if is_down(view) else status_words(view, utcnow())


def summary_line(views: list[NodeView]) -> str:
    """"31 nodes: 1 running, 30 waiting to be claimed, 1 needs you": a node waiting for its
    claim is counted apart (it runs, but does nothing for a cadre yet)."""
    if not views:
        return "No nodes yet"
    waiting = sum(1 for v in views if phase(v) is Phase.UNCLAIMED)
    running = sum(1 for v in views if v.running) - waiting
    attention = sum(1 for v in views if needs_attention(v))
    parts = [f"{running} running"] if running or not waiting else []
    parts += [f"{waiting} waiting to be claimed"] if waiting else []
    parts += [f"{attention} need{'s' if attention == 1 else ''} you"] if attention else []
    return f"{len(views)} node{'s' if len(views) != 1 else ''}: {', '.join(parts)}"


def fleet_summary(computers: int, unreachable: int, nodes: str) -> str:
    """"3 computers, 14 nodes: 12 running, 1 needs you; 1 computer unreachable" (a lone computer: `nodes`)."""
    if computers <= 1:
        return nodes
    away = f"; {unreachable} computer{'s' if unreachable != 1 else ''} unreachable" if unreachable else ""
    return f"{computers} computers, {nodes[0].lower()}{nodes[1:]}{away}"


def attention_first(views: list[NodeView]) -> list[NodeView]:
    """Nodes that need the person first, then the rest by urgency; ties keep their order."""
    return sorted(views, key=lambda v: (not needs_attention(v), -node_state(v).rank))


def duration_words(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def uptime_words(view: SupervisedView, now: datetime) -> str:
    started = parse_iso(view.started_at) if view.running else None
    return duration_words((now - started).total_seconds()) if started else ""


def first_line(text: str | None, width: int = 120) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def tooltip(views: list[NodeView], now: datetime, name: Callable[[NodeView], str] = lambda v: v.name) -> str:
    """The tray's tooltip: the state, then the five worst nodes (`name`: a fleet's names them with their computer)."""
    state = aggregate(views)
    if not views:
        return "cadre-desktop: no nodes yet. Open the window to add one."
    lines = [f"cadre-desktop: {SUMMARY[state]}"]
    worst = sorted(views, key=lambda v: -node_state(v).rank)
    lines += [f"{name(v)}: {status_words(v, now)}" for v in worst[:5]]
    if len(views) > 5:
        lines.append(f"… and {len(views) - 5} more")
    return "\n".join(lines)


def exit_line(view: NodeView | None, reason: str = "") -> str:
    """The node's own last words: what the engine recorded of its exit, else the last log
    line the give-up reason quotes, else the reason's first line."""
    recorded = getattr(view, "last_exit", None) if view is not None else None
    if recorded:
        return first_line(recorded, 200)
    reason = reason or (view.last_error if view is not None else "") or ""
    head, marker, tail = reason.partition("Last log lines:")
    quoted = [line.strip() for line in tail.splitlines() if line.strip()] if marker else []
    return first_line(quoted[-1], 200) if quoted else first_line(head, 200)


#: "Until tomorrow" in the tray's *Pause all* is the next time it is this hour here.
MORNING_HOUR = 8


def next_morning(now: datetime) -> datetime:
    """The next 08:00 local time after `now` (aware): "until tomorrow" (at 01:00, this morning's)."""
    local = now.astimezone()
    when = local.replace(hour=MORNING_HOUR, minute=0, second=0, microsecond=0)
    if when <= local:
        when = (when.replace(tzinfo=None) + timedelta(days=1)).astimezone()  # tomorrow's offset (a DST change)
    return when


def pause_words(pause: dict, now: datetime) -> str:
    """Pause all in words: "paused for 24 more minutes", "paused until Tue 08:00", "paused until you resume"."""
    if not pause.get("paused"):
        return ""
    until = parse_iso(pause.get("until"))
    if until is None:
        return "paused until you resume"
    left = (until - now).total_seconds()
    if left < 2 * 3600:
        minutes = max(1, round(left / 60))
        return f"paused for {minutes} more minute{'s' if minutes != 1 else ''}"
    return f"paused until {until.astimezone().strftime('%a %H:%M')}"
