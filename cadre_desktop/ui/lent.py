"""The Lent view: every grant, the nodes lent under it, and what the owner can do about them.

A tab of the node window (`install_tab` puts it beside the nodes without the
window knowing). Per grant: label, status, limits, expiry, with *Copy grant
link*, *Show QR* and *Revoke*; per lent node: party, status, peer id, uptime,
attempts, last error, with *End loan*, *Retry* and *View log*. Views are read
from the Host's lending on every lending event and once a second while shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import shiboken6
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QGuiApplication
from PySide6.QtWidgets import (
    QHBoxLayout, QLabel, QMainWindow, QPushButton, QSplitter, QTabWidget, QTreeWidget, QTreeWidgetItem,
    QVBoxLayout, QWidget,
)

from cadre_desktop.host.donations import DONATION_SUPERVISED, DonationStatus
from cadre_desktop.host.grants import GrantState
from cadre_desktop.host.lend_views import DonationView, GrantView
from cadre_desktop.ui import dialogs
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.logview import LogView
from cadre_desktop.ui.model import status_dot
from cadre_desktop.ui.status import COLOURS, TrayState, first_line, seconds_until, uptime_words, utcnow

COLUMNS = ("Grant / party", "Status", "Nodes", "Expires", "Peer id", "Uptime", "Attempts", "Last error")
NAME, STATUS, NODES, EXPIRES, PEER, UPTIME, ATTEMPTS, ERROR = range(len(COLUMNS))
EMPTY_TEXT = (
    "<h3>Nothing is lent</h3><p>You can lend nodes of this computer to a cadre that is not yours: "
    "<b>Lend nodes…</b> makes a grant, a link (and QR code) you give to its owner. Their software then "
    "asks this computer for up to the number of nodes you allow; you can end any loan, or revoke the "
    "grant, at any time.</p>"
)


def donation_state(v: DonationView) -> TrayState:
    if v.status == DonationStatus.ERROR:
        return TrayState.ERROR
    if v.status == DonationStatus.PROVISIONING or (v.status in DONATION_SUPERVISED and not v.running):
        return TrayState.BUSY
    if v.status == DonationStatus.AWAITING_SEED:
        return TrayState.UNCLAIMED
    return TrayState.JOINED


def donation_words(v: DonationView, now: datetime) -> str:
    if v.status in DONATION_SUPERVISED and not v.running:
        if v.waiting_for == "keyring":
            return "Waiting for the keyring"
        left = seconds_until(v.next_retry_at, now)
        return f"Restarting in {left} s" if left else "Restarting…"
    return {DonationStatus.PROVISIONING: "Starting…", DonationStatus.AWAITING_SEED: "Waiting for its seed",
            DonationStatus.SEEDED: f"Seeded for {v.party_id}", DonationStatus.ERROR: "Error"}.get(v.status, v.status)


@dataclass(frozen=True)
class LentNoticeView:
    """What a notification says of a lent node (the fields a hosted node's view gives it)."""

    id: str
    name: str
    status: str
    mode: str
    last_exit: str | None
    last_error: str | None
    lent: bool = True


def lent_notice_view(host, donation_id: str) -> LentNoticeView | None:
    lending = getattr(host, "lending", None)
    try:
        v = lending.views.donation(donation_id) if lending is not None and lending.views is not None else None
    except Exception:
        return None
    if v is None:
        return None
    return LentNoticeView(v.id, f"The node lent to {v.party_id}", v.status, "donated", v.last_exit, v.last_error)


class LentModel(QObject):
    """Grants and lent nodes as the Host's lending sees them now."""

    refreshed = Signal()

    def __init__(self, host, bridge: HostBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.now = utcnow()
        self._grants: list[GrantView] = []
        self._donations: list[DonationView] = []
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self.refresh)
        bridge.happened.connect(self._on_event)
        self.refresh()

    @property
    def views(self):
        lending = getattr(self.host, "lending", None)
        return lending.views if lending is not None else None

    def _on_event(self, kind: str, _id: str) -> None:
        if kind.startswith(("grant", "donation")) or kind in ("woke", "address"):
            self.refresh()

    def set_ticking(self, on: bool) -> None:
        if on and not self._tick.isActive():
            self.refresh()
            self._tick.start()
        elif not on:
            self._tick.stop()

    def refresh(self) -> None:
        self.now = utcnow()
        views = self.views
        self._grants = views.grants() if views is not None else []
        self._donations = views.donations() if views is not None else []
        self.refreshed.emit()

    def grants(self) -> list[GrantView]:
        return list(self._grants)

    def donations(self, grant_id: str | None = None) -> list[DonationView]:
        return [d for d in self._donations if grant_id is None or d.grant_id == grant_id]

    def grant(self, grant_id: str) -> GrantView | None:
        return next((g for g in self._grants if g.id == grant_id), None)

    def donation(self, donation_id: str) -> DonationView | None:
        return next((d for d in self._donations if d.id == donation_id), None)

    def states(self) -> list[TrayState]:
        """What the lent nodes add to the tray's colour."""
        return [donation_state(d) for d in self._donations]


class LendLogs:
    """The log a LogView follows, for a lent node."""

    def __init__(self, host) -> None:
        self.host = host

    def log_tail(self, donation_id: str, lines: int = 200) -> list[str]:
        return self.host.lending.views.log_tail(donation_id, lines)


class LentView(QWidget):
    lend_requested = Signal()
    #: A grant's QR code and link: its id.
    link_requested = Signal(str)

    def __init__(self, host, model: LentModel, actions: Actions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host, self.model, self.actions = host, model, actions
        self._make_buttons()
        self.empty = QLabel(EMPTY_TEXT)
        self.empty.setWordWrap(True)
        self.empty.setTextFormat(Qt.TextFormat.RichText)
        split = self._make_tree_and_log()
        self._lay_out(split)
        self._connect()
        self.fill()

    def _make_buttons(self) -> None:
        """*Lend nodes…* above; the grant's and the lent node's buttons below, unplaced."""
        self.lend_button = QPushButton("Lend nodes…")
        self.copy_button = QPushButton("Copy grant link")
        self.qr_button = QPushButton("Show QR")
        self.revoke_button = QPushButton("Revoke…")
        self.end_button = QPushButton("End loan…")
        self.retry_button = QPushButton("Retry")
        self.log_button = QPushButton("View log")
        self.log_button.setCheckable(True)
        self.revoke_button.setToolTip("Refuse this grant from now on, and end every loan made under it")
        self.retry_button.setToolTip("Try again a lent node the host gave up on")

    def _make_tree_and_log(self) -> QSplitter:
        """Grants with their lent nodes, above the selected lent node's (hidden) log."""
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(True)
        self.log = LogView(LendLogs(self.host))
        self.log.hide()
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.tree)
        split.addWidget(self.log)
        return split

    def _lay_out(self, split: QSplitter) -> None:
        top = QHBoxLayout()
        top.addWidget(self.lend_button)
        top.addStretch(1)
        rows = QHBoxLayout()
        for button in (self.copy_button, self.qr_button, self.revoke_button, self.end_button, self.retry_button,
                       self.log_button):
            rows.addWidget(button)
        rows.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.empty)
        layout.addWidget(split, 1)
        layout.addLayout(rows)
        self.status = QLabel()
        layout.addWidget(self.status)

    def _connect(self) -> None:
        self.lend_button.clicked.connect(self.lend_requested.emit)
        self.copy_button.clicked.connect(self._copy_link)
        self.qr_button.clicked.connect(lambda: self._grant_selected(self.link_requested.emit))
        self.revoke_button.clicked.connect(lambda: self._grant_selected(self.ask_revoke))
        self.end_button.clicked.connect(lambda: self._donation_selected(self.ask_end))
        self.retry_button.clicked.connect(lambda: self._donation_selected(self.retry))
        self.log_button.toggled.connect(self.log.setVisible)
        self.tree.itemSelectionChanged.connect(self.update_buttons)
        self.model.refreshed.connect(self.fill)
        self.actions.busy_changed.connect(self.update_buttons)

    # -- the tree ------------------------------------------------------------------------

    def fill(self) -> None:
        selected = self.selected()
        self.tree.blockSignals(True)
        try:
            self.tree.clear()
            for grant in self.model.grants():
                item = QTreeWidgetItem(self._grant_row(grant))
                item.setData(0, Qt.ItemDataRole.UserRole, ("grant", grant.id))
                for d in self.model.donations(grant.id):
                    child = QTreeWidgetItem(self._donation_row(d))
                    child.setData(0, Qt.ItemDataRole.UserRole, ("donation", d.id))
                    colour = COLOURS[donation_state(d)]
                    child.setIcon(STATUS, status_dot(colour))
                    child.setForeground(STATUS, QColor(colour))
                    if d.last_error:
                        child.setToolTip(ERROR, d.last_error)
                    item.addChild(child)
                self.tree.addTopLevelItem(item)
                item.setExpanded(True)
                if selected == ("grant", grant.id):
                    item.setSelected(True)
                for i in range(item.childCount()):
                    if selected == item.child(i).data(0, Qt.ItemDataRole.UserRole):
                        item.child(i).setSelected(True)
        finally:
            self.tree.blockSignals(False)
        for col in range(len(COLUMNS) - 1):
            self.tree.resizeColumnToContents(col)
        self.empty.setVisible(not self.model.grants())
        self.update_buttons()

    def _grant_row(self, g: GrantView) -> list[str]:
        expires = g.expires_at[:16].replace("T", " ") if g.expires_at else "never"
        return [g.label, g.status.capitalize(), f"{g.nodes} of {g.max_nodes}", expires, "", "", "", ""]

    def _donation_row(self, d: DonationView) -> list[str]:
        up = uptime_words(d, self.model.now) if d.running else ""
        attempts = str(d.attempts) if d.attempts else ""
        return [f"{d.party_id} ({d.id})", donation_words(d, self.model.now), "", "", d.peer_id or "", up,
                attempts, first_line(d.last_error or d.last_exit, 80)]

    def selected(self) -> tuple[str, str] | None:
        items = self.tree.selectedItems()
        return tuple(items[0].data(0, Qt.ItemDataRole.UserRole)) if items else None

    def select(self, kind: str, row_id: str) -> None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            for candidate in [item] + [item.child(j) for j in range(item.childCount())]:
                if candidate.data(0, Qt.ItemDataRole.UserRole) == (kind, row_id):
                    self.tree.setCurrentItem(candidate)
                    return

    def _grant_selected(self, act) -> None:
        sel = self.selected()
        if sel and sel[0] == "grant":
            act(sel[1])

    def _donation_selected(self, act) -> None:
        sel = self.selected()
        if sel and sel[0] == "donation":
            act(sel[1])

    def update_buttons(self, *_) -> None:
        sel = self.selected()
        grant = self.model.grant(sel[1]) if sel and sel[0] == "grant" else None
        donation = self.model.donation(sel[1]) if sel and sel[0] == "donation" else None
        active = grant is not None and grant.status == GrantState.ACTIVE and not self.actions.busy(grant.id)
        for button in (self.copy_button, self.qr_button, self.revoke_button):
            button.setEnabled(active)
        free = donation is not None and not self.actions.busy(donation.id)
        self.end_button.setEnabled(free)
        self.retry_button.setEnabled(free and donation.status == DonationStatus.ERROR)
        self.log_button.setEnabled(donation is not None)
        self.log.follow(donation.id if donation else None)

    # -- actions -----------------------------------------------------------------------

    def _copy_link(self) -> None:
        sel = self.selected()
        if not sel or sel[0] != "grant":
            return

        def copied(link: str) -> None:
            QGuiApplication.clipboard().setText(link)
            self.status.setText("Grant link copied. It lets whoever holds it borrow nodes: share it with care.")

        self.actions.run("copy the grant link", self.host.lending.link_of(sel[1]), sel[1], done=copied)

    def ask_revoke(self, grant_id: str) -> None:
        g = self.model.grant(grant_id)
        if g is None:
            return
        dialogs.confirm(
            self, "Revoke grant", f"Revoke the grant “{g.label}”?", "Revoke",
            lambda: self.actions.run(f"revoke {g.label}", self.host.lending.revoke_grant(grant_id), grant_id),
            detail=(f"Its link stops working, and the {g.nodes} node{'s' if g.nodes != 1 else ''} lent under it "
                    "are stopped and deleted, with their work folders. This cannot be undone."),
        )

    def ask_end(self, donation_id: str) -> None:
        d = self.model.donation(donation_id)
        if d is None:
            return
        dialogs.confirm(
            self, "End loan", f"End the loan of this node to {d.party_id}?", "End loan",
            lambda: self.actions.run(f"end the loan of {donation_id}",
                                     self.host.lending.end_loan(donation_id),
                                     donation_id),
            detail="The node is stopped and its work folder (its identity and everything the other cadre "
                   "kept on it) is deleted. This cannot be undone.",
        )

    def retry(self, donation_id: str) -> None:
        self.actions.run(f"retry the lent node {donation_id}", self.host.lending.retry(donation_id),
                         donation_id)


def install_tab(window: QMainWindow, view: LentView, model: LentModel) -> QTabWidget:
    """Put the Lent view in a tab beside what the window shows; returns the tabs."""
    tabs = QTabWidget()
    tabs.setDocumentMode(True)
    tabs.addTab(window.takeCentralWidget(), "Nodes")
    tabs.addTab(view, "Lent")
    window.setCentralWidget(tabs)
    tabs.currentChanged.connect(lambda index: model.set_ticking(tabs.widget(index) is view and window.isVisible()))
    return tabs


class LentUi(QObject):
    """The Lent tab, the grant dialogs and the way to them, for the Shell."""

    def __init__(self, host, bridge: HostBridge, actions: Actions, window: QMainWindow,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.actions, self.window = host, actions, window
        self.model = LentModel(host, bridge, self)
        self.view = LentView(host, self.model, actions)
        self.tabs = install_tab(window, self.view, self.model)
        self.view.lend_requested.connect(self.ask_lend)
        self.view.link_requested.connect(self.show_link)

    def show_lent(self) -> None:
        self.window.present()
        self.tabs.setCurrentWidget(self.view)
        self.model.set_ticking(True)

    def _parent(self):
        return self.window if self.window.isVisible() else None

    def ask_lend(self):
        from cadre_desktop.ui.grant_dialog import GrantDialog

        dialog = GrantDialog(self._parent(), self.host.settings.lend_max_nodes, self._create)
        dialog.open()
        return dialog

    def _create(self, dialog, label, max_nodes, expires_in_s) -> None:
        lending = self.host.lending

        async def make():
            grant = await lending.create_grant(label, max_nodes, expires_in_s)
            return grant, await lending.link_of(grant.id)

        def made(result) -> None:
            if shiboken6.isValid(dialog):  # it may have been closed meanwhile
                dialog.show_link(result[0].label, result[1])

        task = self.actions.run("make a grant", make(), done=made)
        task.add_done_callback(
            lambda t: shiboken6.isValid(dialog) and (t.cancelled() or t.exception()) and dialog.failed())

    def show_link(self, grant_id: str):
        from cadre_desktop.ui.grant_dialog import GrantDialog

        grant = self.model.grant(grant_id)
        if grant is None:
            return None
        dialog = GrantDialog(self._parent(), self.host.settings.lend_max_nodes, self._create)
        self.actions.run(f"show the link of {grant.label}", self.host.lending.link_of(grant_id), grant_id,
                         done=lambda link: (dialog.show_link(grant.label, link), dialog.open()))
        return dialog
