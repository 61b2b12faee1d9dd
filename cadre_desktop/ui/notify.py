"""Desktop notifications: decide what matters before saying anything.

Two things are worth interrupting a person for: the host gave up on a node
(once per give-up, however often the engine repeats itself, until the node
leaves `error`), and a node was claimed. Nothing about a node whose action the
person started and is still running (a Remove, a Restart), nothing once Quit
began, nothing at all with the `notifications` setting off. Clicking a
notification opens the window on its node.

After a wake from sleep, give-ups are held for a settle period (nodes that
died while the machine slept are being respawned meanwhile) and then said in
one notification, so a wake never produces a burst.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QSystemTrayIcon

from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.status import first_line

log = logging.getLogger(__name__)

SHOW_MS = 15_000
SETTLE_MS = 15_000


class Notifier(QObject):
    #: Every notification shown: node id, title, body.
    shown = Signal(str, str, str)
    #: The person clicked the notification about this node.
    open_node = Signal(str)
    #: ... about a node lent to another cadre.
    open_lent = Signal()

    def __init__(self, host, bridge: HostBridge, actions: Actions, tray: QSystemTrayIcon | None,
                 enabled: bool = True, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.actions, self.tray, self.enabled = host, actions, tray, enabled
        self.muted = False
        self._given_up: set[str] = set()
        self._last_node = ""
        self._held: list[tuple[str, str]] = []
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(SETTLE_MS)
        self._settle.timeout.connect(self._flush_held)
        bridge.woke.connect(self._on_woke)
        bridge.gave_up.connect(self._on_gave_up)
        bridge.donation_gave_up.connect(self._on_gave_up)  # a lent node: told like a hosted one
        bridge.happened.connect(self._on_lending)
        bridge.claimed.connect(self._on_claimed)
        bridge.changed.connect(self._on_changed)
        bridge.removed.connect(self._given_up.discard)
        if tray is not None:
            tray.messageClicked.connect(self._clicked)

    def mute(self) -> None:
        """From Quit on: stopping nodes is what the person asked for."""
        self.muted = True

    def _name(self, node_id: str) -> str | None:
        try:
            return self.host.get_node(node_id).name
        except Exception:
            pass
        lent = self._lent(node_id)
        return f"The node lent to {lent.party_id}" if lent is not None else None

    def _lent(self, node_id: str):
        lending = getattr(self.host, "lending", None)
        try:
            return lending.views.donation(node_id) if lending is not None and lending.views else None
        except Exception:
            return None

    def _on_lending(self, kind: str, node_id: str) -> None:
        """A lent node that left `error` (a Retry) or is gone may be told about again."""
        if kind in ("donation_changed", "donation_removed") and node_id in self._given_up:
            lent = self._lent(node_id)
            if lent is None or lent.status != "error":
                self._given_up.discard(node_id)

    def _on_changed(self, node_id: str) -> None:
        try:
            if self.host.get_node(node_id).status != "error":
                self._given_up.discard(node_id)
        except Exception:
            self._given_up.discard(node_id)

    def _on_woke(self, slept_s: float) -> None:
        self._settle.start()  # (re)start the settle period

    def _flush_held(self) -> None:
        held = [(n, r) for n, r in self._held if n in self._given_up]
        self._held.clear()
        if len(held) == 1:
            self._say_gave_up(*held[0])
        elif held:
            names = [name for n, _ in held if (name := self._name(n))]
            if names:
                self._notify(held[0][0], f"{len(names)} nodes stopped",
                             f"{', '.join(names)}\nOpen cadre-desktop to retry them.",
                             QSystemTrayIcon.MessageIcon.Warning)

    def _on_gave_up(self, node_id: str, reason: str) -> None:
        if node_id in self._given_up:
            return
        self._given_up.add(node_id)
        if self._settle.isActive():
            self._held.append((node_id, reason))
            return
        self._say_gave_up(node_id, reason)

    def _say_gave_up(self, node_id: str, reason: str) -> None:
        name = self._name(node_id)
        if name is not None:
            body = first_line(reason, 200) or "It kept stopping."
            self._notify(node_id, f"{name} stopped", f"{body}\nOpen cadre-desktop to retry it.",
                         QSystemTrayIcon.MessageIcon.Warning)

    def _on_claimed(self, node_id: str, cadre: str) -> None:
        try:
            view = self.host.get_node(node_id)
        except Exception:
            return
        title = f"{view.name} was claimed" if view.mode == "claim" else f"{view.name} joined its cadre"
        self._notify(node_id, title, f"It joined the cadre {cadre}." if cadre else "It joined its cadre.",
                     QSystemTrayIcon.MessageIcon.Information)

    def _notify(self, node_id: str, title: str, body: str, icon: QSystemTrayIcon.MessageIcon) -> None:
        if not self.enabled or self.muted or self.actions.busy(node_id):
            return
        self._last_node = node_id
        log.info("notification: %s", title)
        if self.tray is not None and self.tray.isVisible() and QSystemTrayIcon.supportsMessages():
            self.tray.showMessage(title, body, icon, SHOW_MS)
        self.shown.emit(node_id, title, body)

    def _clicked(self) -> None:
        if self._last_node and self._lent(self._last_node) is not None:
            self.open_lent.emit()
        elif self._last_node:
            self.open_node.emit(self._last_node)
