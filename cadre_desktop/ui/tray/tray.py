"""The tray icon: the worst state across nodes as picture and tooltip, and a menu that scales.

The menu is built once: a summary line ("7 nodes: 5 running, 1 waiting to be claimed,
1 needs you"),
five node slots (nodes that need the person first, each with its own *Retry*
slot under it), *Show all…* when there are more, then the fixed items. After
that it is only updated in place, and only where a text, a visibility or an
enabled state really changed: under a StatusNotifierItem host every change is
a D-Bus signal, and a menu that is cleared and refilled floods the bus. No
countdown appears in it, so it does not change every second.

*Pause all* (a submenu: 30 minutes, 1 hour, until tomorrow (the next 08:00 here), until I
resume) holds every node; while it lasts the icon is grey with its own tooltip, the summary
says so ("Paused for 24 more minutes") and *Resume* takes its place. Its words are looked at
again every half minute while it lasts (minutes, never seconds).

While the engine starts (the icon shows first) the summary says "Starting…", the icon is
the busy one, and the items that need the engine (Add, Join, Lend) are disabled; the node
slots fill in as the engine re-attaches, and `set_starting(None)` brings the rest back.

It is not changed while open (some platforms show a stale or broken menu when
its actions change under it): a change that lands while it is open is applied
once it closes. Every QAction is created with the menu as parent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from cadre_desktop.host.core.records.records import HELD
from cadre_desktop.ui.nodes.model import NodeTableModel
from cadre_desktop.ui.tray.icons import TrayIcons
from cadre_desktop.ui.tray.status import (
    TrayState,
    aggregate,
    attention_first,
    fleet_summary,
    gave_up,
    menu_words,
    next_morning,
    pause_words,
    summary_line,
    tooltip,
    utcnow,
)

log = logging.getLogger(__name__)

NODE_SLOTS = 5
#: How often Pause all's words are looked at again while it lasts.
PAUSE_TICK_MS = 30_000
#: *Pause all*'s choices: its words, and the pause it asks for (`for_ms`, or `until` from now).
PAUSE_CHOICES: tuple[tuple[str, Callable[[], dict]], ...] = (
    ("30 minutes", lambda: {"for_ms": 30 * 60_000}),
    ("1 hour", lambda: {"for_ms": 60 * 60_000}),
    ("Until tomorrow (08:00)", lambda: {"until": next_morning(utcnow())}),
    ("Until I resume", lambda: {}),
)

STARTING = "Starting…"
STARTING_TIP = "cadre-desktop: starting…"
QUITTING = "Starting… (quits once started)"


def _escaped(text: str) -> str:
    """A node's name is not a mnemonic."""
    return text.replace("&", "&&")


class Tray(QObject):
    open_window = Signal()
    open_node = Signal(str)
    retry_node = Signal(str)
    resume_node = Signal(str)
    add_node = Signal()
    join_node = Signal()
    lend_nodes = Signal()
    add_computer = Signal()
    join_computers = Signal()
    open_lent = Signal()
    preferences = Signal()
    quit = Signal()
    #: Pause all: the pause asked for ({} until resumed, {"for_ms": N} or {"until": aware datetime}).
    pause_all = Signal(dict)
    resume_all = Signal()

    def __init__(self, model: NodeTableModel, icons: TrayIcons, parent: QObject | None = None, lent=None,
                 pause_state: Callable[[], dict] = lambda: {"paused": False}) -> None:
        super().__init__(parent)
        self.model, self.icons = model, icons
        #: Pause all now (`Host.pause_state`): {"paused": false}, or its since, until and left_ms.
        self.pause_state = pause_state
        self._pause_tick = QTimer(self)
        self._pause_tick.setInterval(PAUSE_TICK_MS)
        self._pause_tick.timeout.connect(self.update)
        #: The lent nodes (ui/lending/lent_core.py): they count in the colour, the tooltip and the menu.
        self.lent = lent
        self.icon = QSystemTrayIcon(self)
        self.menu = QMenu()
        self._state = None
        self._slot_ids: list[str | None] = [None] * NODE_SLOTS
        #: The slots whose node is held (paused, sleeping, done): their remedy is Resume.
        self._held_slots: set[int] = set()
        #: How many item changes were applied (each is a signal to a StatusNotifierItem host).
        self.changes = 0
        self._closed = False
        #: The engine is starting: "Starting…" (or, asked to quit meanwhile, QUITTING), else None.
        self.starting: str | None = None
        self._build()
        self.icon.setContextMenu(self.menu)
        self.menu.aboutToHide.connect(lambda: QTimer.singleShot(0, self, self.update))
        self.icon.activated.connect(self._activated)
        model.refreshed.connect(self.update)
        if lent is not None:
            lent.refreshed.connect(self.update)
        self.update()

    def _build(self) -> None:
        menu = self.menu
        self.summary = menu.addAction("")
        self.summary.setEnabled(False)
        menu.addSeparator()
        self.node_actions: list[QAction] = []
        self.retry_actions: list[QAction] = []
        for slot in range(NODE_SLOTS):
            node = menu.addAction("")
            node.setVisible(False)
            node.triggered.connect(lambda _=False, s=slot: self._slot_signal(s, self.open_node))
            retry = menu.addAction("")
            retry.setVisible(False)
            # A node's remedy: Retry when the host gave up on it, Resume when it is held.
            retry.triggered.connect(lambda _=False, s=slot: self._slot_signal(
                s, self.resume_node if s in self._held_slots else self.retry_node))
            self.node_actions.append(node)
            self.retry_actions.append(retry)
        self.show_all = menu.addAction("Show all…")
        self.show_all.setVisible(False)
        self.show_all.triggered.connect(self.open_window.emit)
        self.lent_action = menu.addAction("")
        self.lent_action.setVisible(False)
        self.lent_action.triggered.connect(self.open_lent.emit)
        menu.addSeparator()
        menu.addAction("Open window").triggered.connect(self.open_window.emit)
        #: What needs the engine: disabled while it starts.
        self.engine_actions: list[QAction] = []
        for text, signal in (("Add node…", self.add_node), ("Join with invitation…", self.join_node),
                             ("Lend nodes…", self.lend_nodes), ("Add a computer…", self.add_computer),
                             ("Join computers…", self.join_computers)):
            action = menu.addAction(text)
            action.triggered.connect(signal.emit)
            self.engine_actions.append(action)
        menu.addSeparator()
        self.pause_menu = QMenu("Pause all", menu)
        for text, body in PAUSE_CHOICES:
            self.pause_menu.addAction(text).triggered.connect(lambda _=False, b=body: self.pause_all.emit(b()))
        self.pause_action = QAction("Pause all", menu)  # the menu its parent, as every item's
        self.pause_action.setMenu(self.pause_menu)
        menu.addAction(self.pause_action)
        self.resume_action = menu.addAction("Resume")
        self.resume_action.setVisible(False)
        self.resume_action.triggered.connect(self.resume_all.emit)
        self.engine_actions.append(self.pause_action)  # Resume shows only once the engine paused
        menu.addSeparator()
        menu.addAction("Preferences…").triggered.connect(self.preferences.emit)
        menu.addSeparator()
        menu.addAction("Quit").triggered.connect(self.quit.emit)

    def _slot_signal(self, slot: int, signal) -> None:
        node_id = self._slot_ids[slot]
        if node_id:
            signal.emit(node_id)

    def show(self) -> None:
        self.icon.show()

    def set_starting(self, words: str | None) -> None:
        """The engine is starting (`STARTING`, or `QUITTING` once Quit was asked), or up (None)."""
        self.starting = words
        self.update()

    def close(self) -> None:
        self.model.refreshed.disconnect(self.update)
        if self.lent is not None:
            self.lent.refreshed.disconnect(self.update)
        self._closed = True
        self._pause_tick.stop()
        self.icon.hide()
        self.menu.deleteLater()

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.open_window.emit()

    # -- following the nodes ------------------------------------------------------------------

    def update(self) -> None:
        if self._closed:
            return
        views, now = self.model.views(), self.model.now
        lent = self.lent.states() if self.lent is not None else []
        starting = [TrayState.BUSY] if self.starting else []
        state = max([aggregate(views), *lent, *starting], key=lambda s: s.rank)
        paused = None if self.starting else pause_words(self.pause_state(), utcnow())
        if paused and state is not TrayState.ERROR:  # a node that needs the person still says so
            state = TrayState.PAUSED
        self._tick(bool(paused))
        if state != self._state:
            self._state = state
            self.icon.setIcon(self.icons.icon(state))
        away = self.model.unreachable()
        text = tooltip(views, now, self.model.label) + (f"\nLent to other cadres: {len(lent)}" if lent else "") + (
            f"\n{away} computer{'s' if away != 1 else ''} of the fleet cannot be reached" if away else "")
        if paused:
            text = f"cadre-desktop: every node is {paused} (Pause all)\n" + text.partition("\n")[2]
        if self.starting:
            text = STARTING_TIP
        if self.icon.toolTip() != text.strip():
            self.icon.setToolTip(text.strip())
        if not self.menu.isVisible():
            self._update_menu(views)
            summary = self.starting or fleet_summary(self.model.computers(), away, summary_line(views))
            self._set(self.summary, text=f"{paused[0].upper()}{paused[1:]} · {summary}" if paused else summary)
            self._set(self.pause_action, visible=not paused)
            self._set(self.resume_action, visible=bool(paused))
            self._set(self.lent_action, visible=bool(lent),
                      text=f"Lent to other cadres: {len(lent)} node{'s' if len(lent) != 1 else ''}…" if lent else None)

    def _tick(self, paused: bool) -> None:
        if paused and not self._pause_tick.isActive():
            self._pause_tick.start()
        elif not paused and self._pause_tick.isActive():
            self._pause_tick.stop()

    def _update_menu(self, views) -> None:
        for action in self.engine_actions:
            self._set(action, enabled=not self.starting)
        shown = attention_first(views)[:NODE_SLOTS]
        for slot in range(NODE_SLOTS):
            v = shown[slot] if slot < len(shown) else None
            self._slot_ids[slot] = v.id if v else None
            node, retry = self.node_actions[slot], self.retry_actions[slot]
            if v is None:
                self._set(node, visible=False)
                self._set(retry, visible=False)
                continue
            name = self.model.label(v)  # another computer's node named with its computer
            self._set(node, text=_escaped(f"{name}: {menu_words(v)}"), visible=True)
            self._held_slots.discard(slot)
            if gave_up(v):
                self._set(retry, text=_escaped(f"Retry {name}"), visible=True)
            elif v.status in HELD:
                self._held_slots.add(slot)
                self._set(retry, text=_escaped(f"Resume {name}"), visible=True)
            else:
                self._set(retry, visible=False)
        more = len(views) > NODE_SLOTS
        self._set(self.show_all, text=f"Show all {len(views)} nodes…" if more else "Show all…", visible=more)

    def _set(self, action: QAction, *, text: str | None = None, visible: bool | None = None,
             enabled: bool | None = None) -> None:
        if text is not None and action.text() != text:
            action.setText(text)
            self.changes += 1
        if enabled is not None and action.isEnabled() != enabled:
            action.setEnabled(enabled)
            self.changes += 1
        if visible is not None and action.isVisible() != visible:
            action.setVisible(visible)
            self.changes += 1
