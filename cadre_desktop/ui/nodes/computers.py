"""The window's computers: one group of rows per computer of the fleet, and what its header says.

Pure functions over the fleet's state and the nodes' views (no Qt): the header's words ("nas ·
unreachable since 14:05 · 4 nodes: 3 running, 1 needs you"), a computer's name told apart from
another of the same name, and the words of an action refused because its computer cannot be reached.
A lone computer has no groups: its window looks as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.fleet import load
from cadre_desktop.ui.tray.status import summary_line

#: The states in which a computer cannot be asked anything (its rows are its last known state, greyed).
AWAY = frozenset({"asleep", "unreachable"})
SHORT_ID = 8


@dataclass(frozen=True)
class Group:
    """One computer's header: who it is, what the fleet last knew of it."""

    id: str
    #: Its name as shown: with a short id when another computer has the same name.
    label: str
    is_self: bool = False
    state: str = "online"  # online | asleep | unreachable
    since: str | None = None
    last_seen: str | None = None
    #: {"cpu_percent", "memory_percent"} as it said (host/fleet/load.py), or None.
    load: dict[str, Any] | None = None
    address: str = ""
    #: Its name as it calls itself (the details add its whole id).
    name: str = ""

    @property
    def away(self) -> bool:
        return not self.is_self and self.state in AWAY


def labels(computers: list[tuple[str, str]]) -> dict[str, str]:
    """Each computer's (id, name) as shown: a name two computers share gets a short id after it."""
    seen: dict[str, int] = {}
    for _, name in computers:
        seen[name.casefold()] = seen.get(name.casefold(), 0) + 1
    return {cid: f"{name} ({cid[:SHORT_ID]})" if seen[name.casefold()] > 1 else name for cid, name in computers}


def groups_of(fleet: Any) -> list[Group]:
    """This computer, then each paired one by name (none when it is paired with no computer)."""
    paired = list(fleet.doc.computers) if fleet is not None else []
    if not paired:
        return []
    named = labels([(fleet.self_id, fleet.name)] + [(c.id, c.name) for c in paired])
    here = Group(fleet.self_id, named[fleet.self_id], is_self=True, address=fleet.address, load=load.here(), name=fleet.name)
    others = []
    for c in paired:
        state = fleet.reach.of(c.id)
        others.append(Group(c.id, named[c.id], state=state.state, since=state.since, last_seen=state.last_seen,
                            load=getattr(state, "load", None), address=c.address, name=c.name))
    return [here] + sorted(others, key=lambda g: (g.label.casefold(), g.id))


def clock_words(stamp: str | None, now: datetime) -> str:
    """An instant as a person reads it here: "14:05" today, "6 Dec 14:05" another day."""
    when = parse_iso(stamp)
    if when is None:
        return "?"
    local, today = when.astimezone(), now.astimezone()
    if local.date() == today.date():
        return f"{local:%H:%M}"
    return f"{local.day} {local:%b %H:%M}" + (f" {local.year}" if local.year != today.year else "")


def state_words(group: Group, now: datetime) -> str:
    """"online", "asleep since 14:02", "unreachable since 14:05"."""
    if group.state in AWAY:
        return f"{group.state} since {clock_words(group.since, now)}" if group.since else group.state
    return "online"


def load_words(load: dict[str, Any] | None) -> str:
    """"CPU 12 %, memory 40 %" (what of it is known), "" when nothing is."""
    if not load:
        return ""
    parts = [f"{label} {load[key]:.0f} %" for key, label in (("cpu_percent", "CPU"), ("memory_percent", "memory"))
             if isinstance(load.get(key), (int, float))]
    return ", ".join(parts)


def nodes_words(views: list[NodeView], group: Group) -> str:
    """"4 nodes: 3 running, 1 needs you" (", as last seen" of one that cannot be reached); "no nodes";
    "no nodes known" of one not heard since this app started."""
    if not views:
        return "no nodes known" if group.away else "no nodes"
    return summary_line(views) + (", as last seen" if group.away else "")


def header_text(group: Group, views: list[NodeView], now: datetime) -> str:
    first = f"This computer · {group.label}" if group.is_self else f"{group.label} · {state_words(group, now)}"
    parts = [first, nodes_words(views, group), load_words(group.load)]
    return " · ".join(p for p in parts if p)


def header_tip(group: Group, now: datetime) -> str:
    where = f"{group.label} ({group.id})" + (f", {group.address}" if group.address else "")
    if group.is_self:
        return f"This computer: {where}"
    seen = f"; last seen {clock_words(group.last_seen, now)}" if group.last_seen else ""
    return f"{where}: {state_words(group, now)}{seen}"


def away_words(group: Group, now: datetime) -> str:
    """An action refused on a node of a computer that cannot be reached, in words."""
    how = "is asleep" if group.state == "asleep" else "cannot be reached"
    since = f" (since {clock_words(group.since, now)})" if group.since else ""
    return f"Not done: {group.label} {how}{since}."
