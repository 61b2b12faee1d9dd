"""Preferences: notifications, quitting, the address, the node program, ports, start at login
(*General*), and *When to run* (`when_prefs.py`: the run conditions, the schedule, the caps).

Every field is checked by the same rules as settings.json (the file is what is
changed; see settings_store.py). A refusal is shown in the dialog, which stays
open with what the person typed. Saved settings are handed on to be applied
live. Start at login is not a setting but the login entry itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from cadre_desktop.errors import CadreError, Invalid
from cadre_desktop.settings import Settings, default_node_command
from cadre_desktop.ui.prefs.when_prefs import WhenToRunPage
from cadre_desktop.ui.settings_store import save_changes

#: The drivers offered (settings.DRIVERS), in words.
DRIVER_CHOICES = (("local", "child processes of cadre-desktop"),
                  ("systemd", "systemd user units (start cold)"))


def _checkbox(text: str, tip: str) -> QCheckBox:
    box = QCheckBox(text)
    box.setToolTip(tip)
    return box


class PreferencesDialog(QDialog):
    #: Saved: the new settings, to apply.
    saved = Signal(object)

    def __init__(self, settings: Settings, settings_file, autostart, detected_address: str,
                 parent: QWidget | None = None, save: Callable[..., Settings] = save_changes) -> None:
        super().__init__(parent)
        self.settings, self.settings_file, self.autostart, self._save = settings, settings_file, autostart, save
        self.setWindowTitle("Preferences — cadre-desktop")
        layout = QVBoxLayout(self)
        self.pages = QTabWidget()
        general = QWidget()
        page = QVBoxLayout(general)
        page.addWidget(self._make_notifications())
        page.addWidget(self._make_starting_and_quitting())
        page.addWidget(self._make_nodes(detected_address))
        page.addStretch(1)
        self.when = WhenToRunPage()
        self.caps = self.when.caps
        self.pages.addTab(general, "&General")
        self.pages.addTab(self.when, "&When to run")
        layout.addWidget(self.pages)
        self._add_error_and_buttons(layout)
        self._fill(settings)

    def _make_notifications(self) -> QGroupBox:
        self.notify = _checkbox("Show &notifications", "Desktop notifications from cadre-desktop")
        self.notify_gave_up = _checkbox("When the host &gives up on a node", "A critical notification with Retry")
        self.notify_claimed = _checkbox("When a node is &claimed", "Someone claimed or joined one of your nodes")
        self.notify.toggled.connect(self._notify_toggled)
        return self._group("Notifications", self.notify, self.notify_gave_up, self.notify_claimed)


    def _notify_toggled(self, on: bool) -> None:
        self.notify_gave_up.setEnabled(on)
        self.notify_claimed.setEnabled(on)
    def _make_starting_and_quitting(self) -> QGroupBox:
        self.keep_running = _checkbox("&Keep nodes running when cadre-desktop quits",
                                      "They keep serving their cadres; the next start takes them back")
        self.ask_on_quit = _checkbox("As&k every time I quit", "Quit asks whether to stop the nodes")
        self.start_at_login = _checkbox("Start cadre-desktop at &login", "Start it, with this home, when you log in")
        return self._group("Starting and quitting", self.start_at_login, self.keep_running, self.ask_on_quit)

    def _make_nodes(self, detected_address: str) -> QGroupBox:
        """The advertised address, the node program and the port range."""
        form = QFormLayout()
        self.advertise = QLineEdit()
        self.advertise.setPlaceholderText(f"detected: {detected_address}")
        self.advertise.setToolTip("The address phones reach your nodes at (QR codes, invitations); "
                                  "empty: this computer's LAN address")
        self.node_command = QLineEdit()
        self.node_command.setPlaceholderText("the reference node (default)")
        self.node_command.setToolTip("The node program and its arguments, as in a shell; empty: the default")
        self.port_low, self.port_high = QSpinBox(), QSpinBox()
        ports = QHBoxLayout()
        for box, tip in ((self.port_low, "The first port nodes may use"), (self.port_high, "The last one")):
            box.setRange(1, 65535)
            box.setToolTip(tip)
            ports.addWidget(box)
        ports.addStretch(1)
        form.addRow("&Advertised address:", self.advertise)
        form.addRow("Node &program:", self.node_command)
        form.addRow("&Run nodes as:", self._make_driver())
        ports_label = QLabel("P&ort range:")
        ports_label.setBuddy(self.port_low)
        form.addRow(ports_label, ports)
        network = QGroupBox("Nodes")
        network.setLayout(form)
        return network

    def _make_driver(self) -> QComboBox:
        """The driver (settings' `driver`): taken at the next start of cadre-desktop."""
        self.driver = QComboBox()
        for name, words in DRIVER_CHOICES:
            self.driver.addItem(words, name)
        self.driver.setToolTip("Child processes of cadre-desktop, or units of your systemd user manager "
                               "(they start cold: no warm standby; they outlive the tray if you keep them "
                               "running at Quit). Takes effect at the next start of cadre-desktop.")
        return self.driver

    def _add_error_and_buttons(self, layout: QVBoxLayout) -> None:
        """Where a refusal is said (hidden until one comes), then *Save* and *Cancel*."""
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setStyleSheet("QLabel { color: #b3261e; }")
        self.error.hide()
        layout.addWidget(self.error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Save).setText("&Save")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)

    @staticmethod
    def _group(title: str, *widgets: QWidget) -> QGroupBox:
        group = QGroupBox(title)
        box = QVBoxLayout(group)
        for widget in widgets:
            box.addWidget(widget)
        return group

    def _fill(self, s: Settings) -> None:
        self.notify.setChecked(s.notifications)
        self.notify_gave_up.setChecked(s.notify_gave_up)
        self.notify_claimed.setChecked(s.notify_claimed)
        self.notify_gave_up.setEnabled(s.notifications)
        self.notify_claimed.setEnabled(s.notifications)
        self.keep_running.setChecked(s.keep_nodes_running_on_quit)
        self.ask_on_quit.setChecked(s.ask_on_quit)
        self.start_at_login.setChecked(self._autostart_on())
        self.advertise.setText(s.advertise_host or "")
        default = s.node_command == default_node_command()
        self.node_command.setText("" if default else shlex.join(s.node_command))
        self.port_low.setValue(s.port_range[0])
        self.port_high.setValue(s.port_range[1])
        self.driver.setCurrentIndex(max(self.driver.findData(s.driver), 0))
        self.when.fill(s)

    def _autostart_on(self) -> bool:
        try:
            state = self.autostart.status()
        except (CadreError, OSError):
            return False
        if isinstance(state, str):  # an entry that starts another app or home: unticked, and why
            self.start_at_login.setToolTip(f"Start at login is {state}")
        return state is True

    def changes(self) -> dict[str, Any]:
        """What the fields say, as settings.json keys (None: back to the default)."""
        text = self.node_command.text().strip()
        try:
            command = shlex.split(text) if text else None
        except ValueError as exc:
            raise Invalid(f"The node program is not a valid command line: {exc}.") from None
        return {
            "notifications": self.notify.isChecked(),
            "notify_gave_up": self.notify_gave_up.isChecked(),
            "notify_claimed": self.notify_claimed.isChecked(),
            "keep_nodes_running_on_quit": self.keep_running.isChecked(),
            "ask_on_quit": self.ask_on_quit.isChecked(),
            "advertise_host": self.advertise.text().strip() or None,
            "node_command": command,
            "port_range": [self.port_low.value(), self.port_high.value()],
            "driver": self.driver.currentData(),
            **self.when.changes(),
        }

    def _differs(self, key: str, value: Any) -> bool:
        current = getattr(self.settings, key)
        if key == "node_command" and value is None:
            return current != default_node_command()
        if key == "port_range":
            return tuple(value) != tuple(current)
        return value != current

    def accept(self) -> None:
        try:
            changes = {k: v for k, v in self.changes().items() if self._differs(k, v)}
            new = self._save(self.settings_file, changes)
            if self.start_at_login.isChecked() != self._autostart_on():
                (self.autostart.enable if self.start_at_login.isChecked() else self.autostart.disable)()
        except CadreError as exc:
            self.error.setText(exc.message)
            self.error.show()
            return
        self.error.hide()
        self.saved.emit(new)
        super().accept()
