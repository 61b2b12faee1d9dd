"""Preferences' *When to run* page: the run conditions, the weekly schedule and the default caps.

The keys are settings.json's (`pause_on_battery`, `pause_when_in_use`, `in_use_idle_minutes`,
`pause_on_metered_network`, `run_schedule`, and the caps box's), checked by the same rules
when saved: a window with no day, a time that is not one, or a window from a time to the
same time is one clear error naming `run_schedule`, and nothing is written. The schedule is
a weekly grid: one row a window, a tick per day it opens on, its from and to (a `to` before
its `from` ends the next day). Nodes with *Always run* (`node set --always-run`) pass over
all of this; *Pause all* in the tray is not a setting.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QGroupBox, QHBoxLayout, QPushButton, QSpinBox, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from cadre_desktop.settings import DAYS, Settings
from cadre_desktop.ui.prefs.caps_prefs import CapsBox

#: The grid's columns: a day each, then from and to.
COLUMNS = [d.capitalize() for d in DAYS] + ["From", "To"]
#: A new row: the weeknights.
NEW_WINDOW: dict[str, Any] = {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00"}


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
        self.grid.setToolTip("A row a window: the days it opens on, from and to (24-hour, like 22:00; "
                             "a to before its from ends the next day; to may be 24:00)")
        self.add_window = QPushButton("&Add window")
        self.add_window.clicked.connect(lambda: self.add_row(NEW_WINDOW))
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
