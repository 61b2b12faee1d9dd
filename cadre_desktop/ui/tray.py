"""The tray icon: the worst state across nodes as picture and tooltip, and the context menu.

The menu is rebuilt from the model's views, only when what it would show
changed, and never while it is open (some platforms show a stale or broken
menu when its actions change under it): a change that lands while it is open
is applied once it closes. Every QAction is created with the menu as parent.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from cadre_desktop.errors import CadreError
from cadre_desktop.ui.errors import show_error
from cadre_desktop.ui.icons import TrayIcons
from cadre_desktop.ui.model import NodeTableModel
from cadre_desktop.ui.status import aggregate, status_words, tooltip

log = logging.getLogger(__name__)


class Tray(QObject):
    open_window = Signal()
    open_node = Signal(str)
    add_node = Signal()
    join_node = Signal()
    lend_nodes = Signal()
    open_lent = Signal()
    quit = Signal()

    def __init__(self, model: NodeTableModel, icons: TrayIcons, autostart, parent: QObject | None = None,
                 lent=None) -> None:
        super().__init__(parent)
        self.model, self.icons, self.autostart = model, icons, autostart
        #: The lent nodes (ui/lent.py): they count in the colour and the menu.
        self.lent = lent
        self.icon = QSystemTrayIcon(self)
        self.menu = QMenu()
        self.icon.setContextMenu(self.menu)
        self.menu.aboutToHide.connect(lambda: QTimer.singleShot(0, self, self.update))
        self.icon.activated.connect(self._activated)
        self._state = None
        self._shown_menu: tuple | None = None
        self.rebuilds = 0
        self._closed = False
        model.refreshed.connect(self.update)
        if lent is not None:
            lent.refreshed.connect(self.update)
        self.update()

    def show(self) -> None:
        self.icon.show()

    def close(self) -> None:
        self.model.refreshed.disconnect(self.update)
        if self.lent is not None:
            self.lent.refreshed.disconnect(self.update)
        self._closed = True
        self.icon.hide()
        self.menu.deleteLater()

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.open_window.emit()

    def update(self) -> None:
        if self._closed:
            return
        views, now = self.model.views(), self.model.now
        lent_states = self.lent.states() if self.lent is not None else []
        state = max([aggregate(views), *lent_states], key=lambda s: s.rank)
        if state != self._state:
            self._state = state
            self.icon.setIcon(self.icons.icon(state))
        text = tooltip(views, now) + (f"\nLent to other cadres: {len(lent_states)}" if lent_states else "")
        if self.icon.toolTip() != text:
            self.icon.setToolTip(text)
        lines = tuple((v.id, f"{v.name}: {status_words(v, now)}") for v in views)
        if lent_states:
            lines += (("", f"Lent to other cadres: {len(lent_states)} node{'s' if len(lent_states) != 1 else ''}"),)
        if lines == self._shown_menu or self.menu.isVisible():
            return
        self._rebuild(lines)

    def _rebuild(self, lines: tuple) -> None:
        self._shown_menu = lines
        self.rebuilds += 1
        menu = self.menu
        menu.clear()
        if not lines:
            menu.addAction("No nodes yet").setEnabled(False)
        for node_id, text in lines:
            if not node_id:  # the lent nodes' line
                menu.addAction(text).triggered.connect(self.open_lent.emit)
                continue
            menu.addAction(text).triggered.connect(lambda _=False, i=node_id: self.open_node.emit(i))
        menu.addSeparator()
        menu.addAction("Open window").triggered.connect(self.open_window.emit)
        menu.addAction("Add node…").triggered.connect(self.add_node.emit)
        menu.addAction("Join with invitation…").triggered.connect(self.join_node.emit)
        if self.lent is not None:
            menu.addAction("Lend nodes…").triggered.connect(self.lend_nodes.emit)
        menu.addSeparator()
        login = menu.addAction("Start at login")
        login.setCheckable(True)
        login.setChecked(self._autostart_on())
        login.toggled.connect(self._set_autostart)
        menu.addSeparator()
        menu.addAction("Quit").triggered.connect(self.quit.emit)

    def _autostart_on(self) -> bool:
        try:
            return self.autostart.status() is True
        except (CadreError, OSError) as exc:
            log.warning("cannot read the start-at-login setting: %s", exc)
            return False

    def _set_autostart(self, on: bool) -> None:
        try:
            log.info("start at login: %s", (self.autostart.enable if on else self.autostart.disable)())
        except (CadreError, OSError) as exc:
            show_error(None, exc, "change start at login")
        self._shown_menu = None  # the check mark follows what is on disk
        QTimer.singleShot(0, self, self.update)
