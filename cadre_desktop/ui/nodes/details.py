"""The details pane: everything the window knows about the selected node, in words (in a fleet, its computer too)."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QCheckBox, QFormLayout, QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from cadre_desktop.errors import CadreError
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.fleetstate.takeover import THIRD_COMPUTER
from cadre_desktop.ui.nodes import computers
from cadre_desktop.ui.nodes.explain import (
    address_words,
    caps_words,
    decision_words,
    exit_code,
    log_lines,
    log_words,
    next_step,
    reason_words,
    state_words,
)
from cadre_desktop.ui.nodes.history_strip import HistoryStrip
from cadre_desktop.ui.nodes.model import NodeTableModel

ROWS = (("computer", "Computer"), ("status", "Status"), ("reason", "Reason"), ("exit", "Exit code"),
        ("decision", "Last decision"), ("next", "Next step"), ("address", "Address"), ("peer", "Peer id"), ("node", "Node id"),
        ("caps", "Caps"), ("fleet", "Fleet"), ("log", "Last log lines"))


class DetailsPane(QScrollArea):
    def __init__(self, model: NodeTableModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.node_id: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        # Lines wrap to the pane's width rather than scrolling sideways.
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        body = QWidget()
        outer = QVBoxLayout(body)
        self.title = QLabel()
        font = self.title.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.2)
        self.title.setFont(font)
        outer.addWidget(self.title)
        form = self.form = QFormLayout()
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.fields: dict[str, QLabel] = {}
        for key, label in ROWS:
            value = QLabel()
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setTextFormat(Qt.TextFormat.PlainText)
            if key == "log":
                value.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
            form.addRow(f"{label}:", value)
            self.fields[key] = value
        #: The last 24 hours and 7 days (host/core/ops/history.py), under the decision.
        self.history = HistoryStrip()
        form.insertRow(ROWS.index(("decision", "Last decision")) + 1, "History:", self.history)
        form.setRowVisible(self.fields["computer"], False)  # shown in a fleet only
        #: Failover (host/fleetrun/failover.py): the node runs on another computer when this one is lost.
        self.failover = QCheckBox("Keep running on another computer")
        self.failover.clicked.connect(self._failover_clicked)
        form.insertRow(ROWS.index(("fleet", "Fleet")) + 1, "Failover:", self.failover)
        outer.addLayout(form)
        outer.addStretch(1)
        self.setWidget(body)
        model.refreshed.connect(self.refresh)
        self.show_node(None)

    def show_node(self, node_id: str | None) -> None:
        self.node_id = node_id
        self.refresh()

    def refresh(self) -> None:
        v = self.model.view(self.node_id) if self.node_id else None
        inner = self.widget()
        if inner is not None:
            inner.setVisible(v is not None)
        if v is not None:
            self._fill(v)

    def _fill(self, v: NodeView) -> None:
        now = self.model.now
        code = exit_code(v)
        values = {
            "status": state_words(v, now),
            "reason": reason_words(v),
            "exit": str(code) if code is not None else "—",
            "decision": decision_words(v, now),
            "next": next_step(v),
            "address": address_words(v),
            "peer": v.peer_id or "—",
            "node": v.id,
            "caps": caps_words(v),
            "fleet": self._fleet_words(v),
            "log": log_words(log_lines(v.log_path)),
        }
        self._set(self.title, v.name)
        computer = self._computer(v)
        self.form.setRowVisible(self.fields["computer"], bool(computer))  # a lone computer's pane as it was
        values["computer"] = computer
        for key, text in values.items():
            self._set(self.fields[key], text)
        self.history.set_history(self._history(v.id))
        refusal = self._refusal()
        self.failover.setEnabled(refusal is None or v.failover)
        if self.failover.isChecked() != v.failover:
            self.failover.setChecked(v.failover)
        self.failover.setToolTip(refusal or "Another computer of the fleet takes the node over when this one"
                                 " sleeps, loses power or its network")

    def _run(self):  # the host's failover, when it has a fleet (host/fleetrun/run.py)
        run = getattr(self.model.host, "fleetrun", None)
        return getattr(run, "failover", None)

    def _refusal(self) -> str | None:
        failover = self._run()
        return "This computer is in no fleet." if failover is None else failover.refusal()

    def _fleet_words(self, v: NodeView) -> str:
        parts = []
        if v.computer:
            parts.append(f"on {v.computer.get('name')}")
        if v.generation:
            parts.append(f"generation {v.generation}")
        if v.fleet_note:
            parts.append(v.fleet_note)
        fleet = getattr(self.model.host, "fleet", None)
        if fleet is not None and len(fleet.doc.computers) == 1:
            parts.append(f"for failover, {THIRD_COMPUTER}")
        return ", ".join(str(p) for p in parts) or "—"

    def _failover_clicked(self, on: bool) -> None:
        failover, node_id = self._run(), self.node_id
        if failover is None or node_id is None:
            return
        async def set_it() -> None:
            try:
                await failover.set(node_id, on)
            except CadreError as exc:
                self._set(self.fields["fleet"], exc.message)
                self.failover.setChecked(not on)
        task = asyncio.ensure_future(set_it())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _computer(self, v: NodeView) -> str:
        """"This computer (desktop)", "nas (pc_…) · unreachable since 14:05"; "" in no fleet."""
        group = self.model.group_of(v.id)
        if group is None:
            return ""
        if group.is_self:
            return f"This computer ({group.name or group.label})"
        return f"{group.name or group.label} ({group.id}) · {computers.state_words(group, self.model.now)}"

    def _history(self, node_id: str) -> dict | None:
        read = getattr(self.model.host, "node_history", None)
        try:
            return read(node_id) if read is not None else None
        except CadreError:  # gone meanwhile, or a host without one: no strip
            return None

    @staticmethod
    def _set(label: QLabel, text: str) -> None:
        if label.text() != text:
            label.setText(text)

    def text(self) -> str:
        """What the pane says, as plain text (for tests and copying)."""
        return "\n".join([self.title.text()] + [f"{label}: {self.fields[key].text()}" for key, label in ROWS
                                                 if key != "computer" or self.fields[key].text()])
