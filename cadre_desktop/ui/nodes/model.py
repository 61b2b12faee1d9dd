"""The table of nodes: views re-read from the Host on every event and once a second.

The one-second tick drives the live countdown and uptime, samples CPU and
memory with psutil, and catches what no event reports (a child that just died
before the supervisor's pass). Rows keep their place across refreshes so the
selection survives.

In a fleet the rows come in groups, one per computer (ui/nodes/computers.py): a header row (not a
node: not selectable) then that computer's nodes. A computer that cannot be reached keeps its
nodes' last known rows, greyed, "last seen 14:05".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psutil
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QGuiApplication, QIcon, QPainter, QPalette, QPen, QPixmap

from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.text import url_host
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.nodes import computers
from cadre_desktop.ui.nodes.computers import AWAY, Group, groups_of
from cadre_desktop.ui.tray.status import first_line, node_colour, node_state, retry_words, status_words, uptime_words, utcnow

COLUMNS = ("Name", "Status", "Uptime", "Attempts", "Cadre", "Address", "CPU", "Memory", "Reason")
NAME, STATUS, UPTIME, ATTEMPTS, CADRE, ADDRESS, CPU, MEMORY, ERROR = range(len(COLUMNS))
#: What each column is as wide as, so a ticking countdown never makes widths jump.
WIDEST = ("Living room", "Waiting to be claimed", "23 h 59 min", "Attempts", "family",
          "192.168.100.20:28299", "100 %", "1000 MB", "")
#: A value to sort by (numbers for numbers, urgency for status).
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
#: True on a computer's header row (a fleet's window).
HEADER_ROLE = Qt.ItemDataRole.UserRole + 2
#: The last known rows of a computer that cannot be reached.
GREY = "#8a8f98"
TICK_MS = 1000
#: The other computers' nodes are asked for this often while the window shows, and while it does not
#: (the tray counts every computer's nodes) (host/fleet/fleet.py:refresh_remote).
REMOTE_MS = 3000
REMOTE_HIDDEN_MS = 15000


_DOTS: dict[str, QIcon] = {}


def status_dot(colour: str) -> QIcon:
    """A round dot of the status colour, the same when its row is selected (Qt would tint it),
    ringed in white so it stays visible on a selection colour of the same hue."""
    if colour not in _DOTS:
        pixmap = QPixmap(14, 14)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(QColor("#ffffff"), 1.5))
        painter.setBrush(QColor(colour))
        painter.drawEllipse(QRectF(1, 1, 12, 12))
        painter.end()
        icon = QIcon()
        for mode in (QIcon.Mode.Normal, QIcon.Mode.Selected, QIcon.Mode.Active):
            icon.addPixmap(pixmap, mode)
        _DOTS[colour] = icon
    return _DOTS[colour]


_BOLD: list[QFont] = []


def _bold() -> QFont:
    if not _BOLD:
        font = QFont()
        font.setBold(True)
        _BOLD.append(font)
    return _BOLD[0]


def _key(row: NodeView | Group) -> tuple[str, str]:
    return ("c" if isinstance(row, Group) else "n", row.id)


def _created(v: NodeView) -> tuple[str, str]:
    return (v.created_at, v.id)


@dataclass
class Usage:
    cpu: float | None = None
    rss: int | None = None


def tick_while_shown(tick: QTimer, on: bool, refresh) -> None:
    """A model's one-second tick runs only while someone looks (the window is shown):
    idle in the tray, the app wakes for engine events alone. Turned on, the model is
    brought up to date at once rather than a tick later."""
    if on and not tick.isActive():
        refresh()
        tick.start()
    elif not on:
        tick.stop()


class NodeTableModel(QAbstractTableModel):
    #: After every refresh: the views may have changed.
    refreshed = Signal()
    #: Another computer's node this tray tells the fleet's give-up of (its view, its computer's name); one left it.
    remote_gave_up = Signal(object, str)
    remote_recovered = Signal(str)

    def __init__(self, host, bridge: HostBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self._rows: list[NodeView | Group] = []
        #: A fleet's computers (none for a lone one), their place in the table, their nodes.
        self._groups: dict[str, Group] = {}
        self._rank: dict[str, int] = {}
        self._members: dict[str, list[NodeView]] = {}
        #: When each other computer's nodes were last listed (its rows' "last seen").
        self._heard: dict[str, str] = {}
        self._usage: dict[str, Usage] = {}
        self._procs: dict[int, psutil.Process] = {}
        self.now = utcnow()
        self.bridge = bridge
        bridge.happened.connect(self._on_event)
        self._tick = QTimer(self)
        self._tick.setInterval(TICK_MS)
        self._tick.timeout.connect(self.refresh)
        #: The fleet's other computers' nodes (their computer named in each), grouped after this one's.
        self._remote: list[NodeView] = []
        self._remote_ids: frozenset[str] = frozenset()
        self._since = utcnow()  # a give-up from before this app started is old news, as for this computer's nodes
        self._asking: asyncio.Future | None = None
        self._remote_tick = QTimer(self)
        self._remote_tick.setInterval(REMOTE_HIDDEN_MS)
        self._remote_tick.timeout.connect(self.ask_remote)
        self._remote_tick.start()  # unpaired, a look at fleet.json's rows in memory: no network, no task
        self.refresh()

    def set_ticking(self, on: bool) -> None:
        tick_while_shown(self._tick, on, self.refresh)
        self._remote_tick.setInterval(REMOTE_MS if on else REMOTE_HIDDEN_MS)
        if on:
            self.ask_remote()

    def ask_remote(self) -> None:
        """Ask the fleet for the other computers' nodes (never twice at once); refreshed when they come."""
        fleet = getattr(self.host, "fleet", None)
        if fleet is None or not fleet.doc.computers:
            self._remote, self._remote_ids = [], frozenset()
            return
        if self._asking is not None and not self._asking.done():
            return
        self._asking = asyncio.ensure_future(fleet.refresh_remote())
        self._asking.add_done_callback(self._remote_came)

    def _remote_came(self, task: asyncio.Future) -> None:
        if task.cancelled() or task.exception() is not None:
            return  # a computer that does not answer is listed as such by the fleet; the rows stay as they were
        before = {v.id: v.status for v in self._remote}
        got = list(task.result())
        answered = {self.computer_id(v) for v in got}
        fleet = self.host.fleet
        stamp = utcnow().isoformat()
        for cid in answered:
            self._heard[cid] = stamp
        # A computer that cannot be reached keeps its nodes' last known rows (greyed, "last seen").
        kept = [v for v in self._remote if (cid := self.computer_id(v)) not in answered
                and fleet.doc.get(cid) is not None and fleet.reach.of(cid).state in AWAY]
        self._remote = got + kept
        self._remote_ids = frozenset(v.id for v in self._remote)
        self._tell_give_ups(before)
        self.refresh()

    def _tell_give_ups(self, before: dict[str, Any]) -> None:
        """A remote node seen going to `error` since the last listing (or first seen so, given up on since this
        app started), told if this tray tells it."""
        fleet = self.host.fleet
        now = {v.id: v for v in self._remote}
        for node_id, status in before.items():
            view = now.get(node_id)
            if status is NodeStatus.ERROR and (view is None or view.status is not NodeStatus.ERROR):
                self.remote_recovered.emit(node_id)
        for view in self._remote:
            computer = view.computer or {}
            fresh = view.id in before or (parse_iso(view.updated_at) or self._since) > self._since
            if (view.status is NodeStatus.ERROR and before.get(view.id) is not NodeStatus.ERROR and fresh
                    and fleet.notifies_for(str(computer.get("id", "")))):
                self.remote_gave_up.emit(view, str(computer.get("name", "another computer")))

    def is_remote(self, node_id: str) -> bool:
        return node_id in self._remote_ids

    def computers(self) -> int:
        """How many computers the nodes shown are of: this one and every paired one."""
        fleet = getattr(self.host, "fleet", None)
        return 1 + (len(fleet.doc.computers) if fleet is not None else 0)

    def local_views(self) -> list[NodeView]:
        """This computer's nodes only (what Quit stops)."""
        return [v for v in self.views() if not self.is_remote(v.id)]

    def label(self, v: NodeView) -> str:
        """A node's name as the tray and the window say it: "Attic · on nas" for another computer's."""
        return self.text(v, NAME)

    def computer_label(self, v: NodeView) -> str:
        """The name of a node's computer as its header says it ("" for a lone computer's)."""
        group = self._groups.get(self.computer_id(v))
        return group.label if group is not None else ""

    def unreachable(self) -> int:
        """How many paired computers cannot be reached now (asleep ones are away on purpose)."""
        return sum(1 for g in self._groups.values() if not g.is_self and g.state == "unreachable")

    def computer_id(self, v: NodeView) -> str:
        if self.is_remote(v.id):
            return str((v.computer or {}).get("id", ""))
        fleet = getattr(self.host, "fleet", None)
        return fleet.self_id if fleet is not None else ""

    def group_of(self, node_id: str) -> Group | None:
        """The computer of a node as the window shows it (None: a lone computer, or a node not shown)."""
        v = self.view(node_id)
        return self._groups.get(self.computer_id(v)) if v is not None else None

    def last_seen(self, v: NodeView) -> str | None:
        """When the last known state of an unreachable computer's node was seen; None when it can be reached."""
        group = self._groups.get(self.computer_id(v))
        if group is None or not group.away:
            return None
        return computers.clock_words(self._heard.get(group.id) or group.last_seen, self.now)

    def stop(self) -> None:
        self._tick.stop()
        self._remote_tick.stop()
        if self._asking is not None:
            self._asking.cancel()
        self.bridge.happened.disconnect(self._on_event)

    # -- reading ---------------------------------------------------------------------

    def views(self) -> list[NodeView]:
        return [v for v in self._rows if isinstance(v, NodeView)]

    def node_count(self) -> int:
        return sum(1 for v in self._rows if isinstance(v, NodeView))

    def view_at(self, row: int) -> NodeView | None:
        """The node of a row; None past the end and on a computer's header."""
        got = self._rows[row] if 0 <= row < len(self._rows) else None
        return got if isinstance(got, NodeView) else None

    def group_at(self, row: int) -> Group | None:
        got = self._rows[row] if 0 <= row < len(self._rows) else None
        return got if isinstance(got, Group) else None

    @property
    def grouped(self) -> bool:
        """The rows come in groups, one per computer (a fleet)."""
        return bool(self._rank)

    def placement(self, row: int) -> tuple[int, int]:
        """Where a row's group comes (this computer first) and whether it is the header (0) or a node (1):
        the proxy sorts within each computer by it (ui/nodes/table.py)."""
        got = self._rows[row] if 0 <= row < len(self._rows) else None
        if isinstance(got, Group):
            return self._rank.get(got.id, 0), 0
        return (self._rank.get(self.computer_id(got), 0), 1) if got is not None and self._rank else (0, 1)

    def members(self, row: int) -> list[int]:
        """The rows of the nodes under a header row (for the filter: a header shows while one of them does)."""
        group = self.group_at(row)
        if group is None:
            return []
        return [i for i, v in enumerate(self._rows) if isinstance(v, NodeView) and self.computer_id(v) == group.id]

    def row_of(self, node_id: str) -> int:
        return next((i for i, v in enumerate(self._rows) if isinstance(v, NodeView) and v.id == node_id), -1)

    def view(self, node_id: str) -> NodeView | None:
        return self.view_at(self.row_of(node_id))

    def _on_event(self, kind: str, node_id: str) -> None:
        self.refresh()

    def refresh(self) -> None:
        self.now = utcnow()
        local = self.host.list_nodes()
        local_ids = {v.id for v in local}
        remote = [v for v in self._remote if v.id not in local_ids]
        groups = groups_of(getattr(self.host, "fleet", None))
        self._groups = {g.id: g for g in groups}
        self._rank = {g.id: i for i, g in enumerate(groups)}
        fresh: list[NodeView | Group]
        if groups:  # a fleet: each computer's header, then its nodes
            members: dict[str, list[NodeView]] = {g.id: [] for g in groups}
            members[groups[0].id] = sorted(local, key=_created)
            for v in sorted(remote, key=_created):
                members.get(self.computer_id(v), []).append(v)  # of a computer just unpaired: gone
            self._members = members
            fresh = []
            for g in groups:
                fresh += [g, *members[g.id]]
        else:
            self._members = {}
            fresh = [*sorted(local, key=_created), *sorted(remote, key=lambda v: (
                str((v.computer or {}).get("name", "")), str((v.computer or {}).get("id", "")), v.created_at, v.id))]
        self._place(fresh)
        self._sample_usage()
        if self._rows:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self._rows) - 1, len(COLUMNS) - 1))
        self.refreshed.emit()

    def _place(self, fresh: list[NodeView | Group]) -> None:
        """The rows become `fresh`, each kept row where it was to Qt (removed, moved, inserted as such),
        so the selection follows its node."""
        want = {_key(r): r for r in fresh}  # a node two computers list (mid-move) shows once
        fresh = list(want.values())
        if len(fresh) == len(self._rows) and all(_key(a) == _key(b) for a, b in zip(fresh, self._rows)):
            self._rows = list(fresh)  # the usual tick: the same rows, fresh views
            return
        for row in reversed(range(len(self._rows))):
            if _key(self._rows[row]) not in want:
                self.beginRemoveRows(QModelIndex(), row, row)
                del self._rows[row]
                self.endRemoveRows()
        order = {k: i for i, k in enumerate(want)}
        keys = [_key(r) for r in self._rows]
        if any(order[a] > order[b] for a, b in zip(keys, keys[1:])):  # a computer renamed: its group moves
            self.layoutAboutToBeChanged.emit()
            old = self.persistentIndexList()
            self._rows.sort(key=lambda r: order[_key(r)])
            moved = {_key(r): i for i, r in enumerate(self._rows)}
            self.changePersistentIndexList(old, [self.index(moved[keys[i.row()]], i.column()) for i in old])
            self.layoutChanged.emit()
        self._rows = [want[_key(r)] for r in self._rows]
        at = 0
        wanted = list(want)
        while at < len(wanted):
            if at < len(self._rows) and _key(self._rows[at]) == wanted[at]:
                at += 1
                continue
            # the new rows before the next kept one (or the end) go in at once
            end = order[_key(self._rows[at])] if at < len(self._rows) else len(wanted)
            self.beginInsertRows(QModelIndex(), at, end - 1)
            self._rows[at:at] = [want[k] for k in wanted[at:end]]
            self.endInsertRows()
            at = end

    def _sample_usage(self) -> None:
        """CPU since the last tick and resident memory of each running child."""
        usage: dict[str, Usage] = {}
        live: dict[int, psutil.Process] = {}
        remote = {v.id for v in self._remote}
        for v in self.views():
            if not (v.running and v.pid) or v.id in remote:  # another computer's pid is not ours to sample
                continue
            proc = self._procs.get(v.pid)
            try:
                if proc is None:
                    proc = psutil.Process(v.pid)
                    proc.cpu_percent(None)  # the first call only starts the measurement
                    usage[v.id] = Usage(None, proc.memory_info().rss)
                else:
                    usage[v.id] = Usage(proc.cpu_percent(None), proc.memory_info().rss)
                live[v.pid] = proc
            except psutil.Error:
                continue
        self._usage, self._procs = usage, live

    # -- Qt's model interface ------------------------------------------------------------

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        if self.group_at(index.row()) is not None:  # a computer's header: never a node to act on
            return Qt.ItemFlag.ItemIsEnabled
        return super().flags(index)

    def _header_data(self, group: Group, col: int, role: int) -> Any:
        if role == Qt.ItemDataRole.DisplayRole:
            return computers.header_text(group, self._members.get(group.id, []), self.now) if col == NAME else ""
        if role == Qt.ItemDataRole.ToolTipRole:
            return computers.header_tip(group, self.now)
        if role == Qt.ItemDataRole.FontRole:
            return _bold()
        if role == Qt.ItemDataRole.ForegroundRole and group.away:
            return QColor(GREY)
        if role == Qt.ItemDataRole.BackgroundRole:
            return QGuiApplication.palette().color(QPalette.ColorGroup.Active, QPalette.ColorRole.AlternateBase)
        if role == HEADER_ROLE:
            return True
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        group = self.group_at(index.row())
        if group is not None:
            return self._header_data(group, index.column(), role)
        v = self.view_at(index.row())
        if v is None:
            return None
        col = index.column()
        if role == Qt.ItemDataRole.ForegroundRole and self.last_seen(v) is not None:
            return QColor(GREY)  # its computer cannot be reached: its last known state
        if role == Qt.ItemDataRole.DisplayRole:
            return self.text(v, col)
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == ERROR and v.last_error:
                return v.last_error
            if col == NAME:
                return f"{v.name} ({v.id})"
            if col == ADDRESS and v.api_port:
                return f"Advertised as {v.advertise_host}; API port {v.api_port}, P2P port {v.p2p_port}"
            return self.text(v, col) or None
        if role == Qt.ItemDataRole.DecorationRole and col == STATUS:
            return status_dot(GREY if self.last_seen(v) is not None else node_colour(v))
        if role == Qt.ItemDataRole.ForegroundRole and col == STATUS:
            return QColor(node_colour(v))
        if role == Qt.ItemDataRole.UserRole:
            return v.id
        if role == SORT_ROLE:
            return self.sort_key(v, col)
        return None

    def sort_key(self, v: NodeView, col: int):
        usage = self._usage.get(v.id, Usage())
        if col == STATUS:
            return f"{9 - node_state(v).rank}{self.text(v, col)}"
        if col == UPTIME:
            started = parse_iso(v.started_at) if v.running and self.last_seen(v) is None else None
            return (self.now - started).total_seconds() if started else -1.0
        if col == ATTEMPTS:
            return float(v.attempts)
        if col == CPU:
            return usage.cpu if usage.cpu is not None else -1.0
        if col == MEMORY:
            return float(usage.rss) if usage.rss is not None else -1.0
        return self.text(v, col).casefold()

    def text(self, v: NodeView, col: int) -> str:
        usage = self._usage.get(v.id, Usage())
        if col == NAME:  # another computer's node says whose it is: the rows of each computer come together
            if not self.is_remote(v.id):
                return v.name
            group = self._groups.get(self.computer_id(v))
            return f"{v.name} · on {group.label if group else (v.computer or {}).get('name', '?')}"
        if col == STATUS:
            return status_words(v, self.now)
        if col == UPTIME:  # of a computer that cannot be reached: when its state was last seen, not a guess
            seen = self.last_seen(v)
            return f"last seen {seen}" if seen else uptime_words(v, self.now)
        if col == ATTEMPTS:
            return retry_words(v, self.now)
        if col == ERROR:
            return first_line(v.last_error, 80)
        if col == CADRE:
            return v.cadre or ""
        if col == ADDRESS:
            return f"{url_host(v.advertise_host)}:{v.api_port}" if v.api_port else ""
        if col == CPU:
            return f"{usage.cpu:.0f} %" if usage.cpu is not None else ""
        if col == MEMORY:
            return f"{usage.rss / 1048576:.0f} MB" if usage.rss is not None else ""
        return ""
