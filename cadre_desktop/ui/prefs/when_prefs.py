"""Preferences' *When to run* page: the run conditions, the weekly schedule and the default caps.

The keys are settings.json's (`pause_on_battery`, `pause_when_in_use`, `in_use_idle_minutes`,
`pause_on_metered_network`, `run_schedule`, and the caps box's), checked by the same rules
when saved: a window with no day, a time that is not one, or a window from a time to the
same time is one clear error naming `run_schedule`, and nothing is written. The schedule is
a weekly grid: one row a window, a tick per day it opens on, its from and to (a `to` before
its `from` ends the next day), every day in view at the dialog's size; *Add window* adds the
days no window has yet, then an empty window to fill in. Nodes with *Always run* (`node set --always-run`) pass over
all of this; *Pause all* in the tray is not a setting.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from cadre_desktop.settings import DAYS, Settings
from cadre_desktop.ui.prefs.caps_prefs import CapsBox

#: The grid's columns: a day each, then from and to.
COLUMNS = [d.capitalize() for d in DAYS] + ["From", "To"]
#: The first row: the weeknights.
NEW_WINDOW: dict[str, Any] = {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00"}
#: The least width of the from and to columns.
TIME_MIN_WIDTH = 64
#: Windows in view without scrolling.
SHOWN_ROWS = 3


def next_window(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """What *Add window* adds: the first row the weeknights; then the days no window opens on
    yet, all day; once every day has one, an empty window to fill in (never a copy)."""
    if not windows:
        return NEW_WINDOW
    taken = {d for w in windows for d in w["days"]}
    free = [d for d in DAYS if d not in taken]
    return {"days": free, "from": "00:00", "to": "24:00"} if free else {"days": [], "from": "", "to": ""}


def _checkbox(text: str, tip: str) -> QCheckBox:
    box = QCheckBox(text)
    box.setToolTip(tip)
    return box


class WhenToRunPage(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.addWidget(self._make_conditions())
        layout.addWidget(self._make_schedule())
        layout.addWidget(caps := CapsBox())
        self.caps = caps

    def _make_conditions(self) -> QGroupBox:
        self.battery = _checkbox("Pause on &battery", "Hold every node while this computer runs on battery")
        self.metered = _checkbox("Pause on a &metered network", "Hold every node while the connection is metered")
        self.in_use = _checkbox("Pause while I &use the computer",
                                "Hold every node while there was input in the last minutes")
        self.idle_minutes = QSpinBox()
        self.idle_minutes.setRange(1, 24 * 60)
        self.idle_minutes.setSuffix(" min without input is idle")
        self.idle_minutes.setToolTip("How long without keyboard or mouse input before the computer counts as idle")
        self.in_use.toggled.connect(self.idle_minutes.setEnabled)
        in_use = QHBoxLayout()
        in_use.addWidget(self.in_use)
        in_use.addWidget(self.idle_minutes)
        in_use.addStretch(1)
        group = QGroupBox("Pause every node (but those set to always run)")
        box = QVBoxLayout(group)
        box.addWidget(self.battery)
        box.addLayout(in_use)
        box.addWidget(self.metered)
        return group

    def _make_schedule(self) -> QGroupBox:
        self.scheduled = _checkbox("Run only in these &hours (local time)",
                                   "Outside every window below, nodes sleep until the next one opens")
        self.grid = QTableWidget(0, len(COLUMNS))
        self.grid.setHorizontalHeaderLabels(COLUMNS)
        self.grid.verticalHeader().setVisible(False)
        header = self.grid.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # a day: its name and its tick
        header.setMinimumSectionSize(TIME_MIN_WIDTH // 2)
        for col in (len(DAYS), len(DAYS) + 1):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch)
        # The grid asks for the width of every column, so the dialog opens with all seven days in view.
        self.grid.setSizeAdjustPolicy(QAbstractScrollArea.SizeAdjustPolicy.AdjustToContents)
        self.grid.setMinimumWidth(self._grid_width())
        rows = self.grid.verticalHeader().defaultSectionSize() * SHOWN_ROWS
        self.grid.setMinimumHeight(header.sizeHint().height() + rows + 2 * self.grid.frameWidth())
        self.grid.setToolTip("A row a window: the days it opens on, from and to (24-hour, like 22:00; "
                             "a to before its from ends the next day; to may be 24:00)")
        self.add_window = QPushButton("&Add window")
        self.add_window.clicked.connect(self._add_next)
        self.remove_window = QPushButton("&Remove window")
        self.remove_window.clicked.connect(self._remove_row)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_window)
        buttons.addWidget(self.remove_window)
        buttons.addStretch(1)
        self.scheduled.toggled.connect(self._schedule_enabled)
        group = QGroupBox("Schedule")
        box = QVBoxLayout(group)
        box.addWidget(self.scheduled)
        box.addWidget(self.grid)
        box.addLayout(buttons)
        return group

    def _schedule_enabled(self, on: bool) -> None:
        for widget in (self.grid, self.add_window, self.remove_window):
            widget.setEnabled(on)
        if on and self.grid.rowCount() == 0:
            self.add_row(NEW_WINDOW)

    def _grid_width(self) -> int:
        header = self.grid.horizontalHeader()
        days = sum(header.sectionSizeFromContents(c).width() for c in range(len(DAYS)))
        frame = 2 * self.grid.frameWidth() + self.grid.verticalScrollBar().sizeHint().width()
        return days + 2 * TIME_MIN_WIDTH + frame

    def _add_next(self) -> None:
        """*Add window*: the next useful window, selected, its from being edited when it is empty."""
        window = next_window(self.windows())
        self.add_row(window)
        row = self.grid.rowCount() - 1
        self.grid.setCurrentCell(row, len(DAYS))
        self.grid.scrollToBottom()
        if not window["days"] and (start := self.grid.item(row, len(DAYS))) is not None:
            self.grid.editItem(start)

    def add_row(self, window: dict[str, Any]) -> None:
        row = self.grid.rowCount()
        self.grid.insertRow(row)
        for col, day in enumerate(DAYS):
            item = QTableWidgetItem()
            item.setFlags(Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled)
            item.setCheckState(Qt.CheckState.Checked if day in window["days"] else Qt.CheckState.Unchecked)
            self.grid.setItem(row, col, item)
        self.grid.setItem(row, len(DAYS), QTableWidgetItem(window["from"]))
        self.grid.setItem(row, len(DAYS) + 1, QTableWidgetItem(window["to"]))

    def _remove_row(self) -> None:
        row = self.grid.currentRow()
        self.grid.removeRow(row if row >= 0 else self.grid.rowCount() - 1)

    def windows(self) -> list[dict[str, Any]]:
        """The grid's rows as `run_schedule` windows (checked when saved)."""
        found = []
        for row in range(self.grid.rowCount()):
            days = [d for col, d in enumerate(DAYS)
                    if (item := self.grid.item(row, col)) is not None and item.checkState() == Qt.CheckState.Checked]
            start, end = (self.grid.item(row, len(DAYS) + i) for i in (0, 1))
            found.append({"days": days, "from": start.text().strip() if start else "",
                          "to": end.text().strip() if end else ""})
        return found

    def fill(self, s: Settings) -> None:
        self.battery.setChecked(s.pause_on_battery)
        self.metered.setChecked(s.pause_on_metered_network)
        self.in_use.setChecked(s.pause_when_in_use)
        self.idle_minutes.setValue(s.in_use_idle_minutes)
        self.idle_minutes.setEnabled(s.pause_when_in_use)
        self.grid.setRowCount(0)
        for window in s.run_schedule or []:
            self.add_row(window)
        self.scheduled.setChecked(bool(s.run_schedule))
        self._schedule_enabled(bool(s.run_schedule))
        self.caps.fill(s)

    def changes(self) -> dict[str, Any]:
        return {
            "pause_on_battery": self.battery.isChecked(),
            "pause_on_metered_network": self.metered.isChecked(),
            "pause_when_in_use": self.in_use.isChecked(),
            "in_use_idle_minutes": self.idle_minutes.value(),
            "run_schedule": self.windows() if self.scheduled.isChecked() else None,
            **self.caps.changes(),
        }
