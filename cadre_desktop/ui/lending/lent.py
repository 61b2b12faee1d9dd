"""The Lent view: every grant, the nodes lent under it, and what the owner can do about them.

A tab of the node window (`install_tab` puts it beside the nodes without the
window knowing). Per grant: label, status, limits, expiry, with *Copy grant
link*, *Show QR* and *Revoke*; per lent node: party, status, peer id, uptime,
attempts, last error, with *End loan*, *Retry* and *View log*. Views are read
from the Host's lending (`lent_core.LentModel`) on every lending event and once
a second while shown. Built only when the window first is (`lent_ui.LentUi`).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMainWindow, QPushButton, QSplitter, QTabWidget, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from cadre_desktop.host.lending.donations import DonationStatus
from cadre_desktop.host.lending.grants import GrantState
from cadre_desktop.host.lending.views import DonationView, GrantView
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.lending.lent_core import LentModel, donation_colour, donation_words
from cadre_desktop.ui.nodes.logview import LogView
from cadre_desktop.ui.nodes.model import status_dot
from cadre_desktop.ui.prefs import dialogs
from cadre_desktop.ui.tray.status import first_line, uptime_words

COLUMNS = ("Grant / party", "Status", "Nodes", "Expires", "Peer id", "Uptime", "Attempts", "Last error")
NAME, STATUS, NODES, EXPIRES, PEER, UPTIME, ATTEMPTS, ERROR = range(len(COLUMNS))
EMPTY_TEXT = (
    "<h3>Nothing is lent</h3><p>You can lend nodes of this computer to a cadre that is not yours: "
    "<b>Lend nodes…</b> makes a grant, a link (and QR code) you give to its owner. Their software then "
    "asks this computer for up to the number of nodes you allow; you can end any loan, or revoke the "
    "grant, at any time.</p>"
)


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
        self.host, self.model, self.runner = host, model, actions
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
        self.runner.busy_changed.connect(self.update_buttons)

    # -- the tree ------------------------------------------------------------------------

    def fill(self) -> None:
        selected = self.selected()
        self.tree.blockSignals(True)
        try:
            self.tree.clear()
            for grant in self.model.grants():
                item = QTreeWidgetItem(self._grant_row(grant))
                item.setData(0, Qt.ItemDataRole.UserRole, ("grant", grant.id))
                if grant.unreachable:
                    item.setToolTip(STATUS, grant.unreachable)
                    item.setToolTip(ERROR, grant.unreachable)
                for d in self.model.donations(grant.id):
                    child = QTreeWidgetItem(self._donation_row(d))
                    child.setData(0, Qt.ItemDataRole.UserRole, ("donation", d.id))
                    colour = donation_colour(d)
                    child.setIcon(STATUS, status_dot(colour))
                    child.setForeground(STATUS, QColor(colour))
                    if d.last_error:
                        child.setToolTip(ERROR, d.last_error)
                    item.addChild(child)
                self.tree.addTopLevelItem(item)
                item.setExpanded(True)
                if selected == ("grant", grant.id):
                    item.setSelected(True)
                for kid in (item.child(i) for i in range(item.childCount())):
                    if kid is not None and selected == kid.data(0, Qt.ItemDataRole.UserRole):
                        kid.setSelected(True)
        finally:
            self.tree.blockSignals(False)
        for col in range(len(COLUMNS) - 1):
            self.tree.resizeColumnToContents(col)
        self.empty.setVisible(not self.model.grants())
        self.update_buttons()

    def _grant_row(self, g: GrantView) -> list[str]:
        expires = g.expires_at[:16].replace("T", " ") if g.expires_at else "never"
        status = g.status.capitalize() + (", unreachable" if g.unreachable else "")
        return [g.label, status, f"{g.nodes} of {g.max_nodes}", expires, "", "", "", first_line(g.unreachable, 80)]

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
            if item is None:
                continue
            for candidate in [item] + [item.child(j) for j in range(item.childCount())]:
                if candidate is not None and candidate.data(0, Qt.ItemDataRole.UserRole) == (kind, row_id):
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
        active = grant is not None and grant.status == GrantState.ACTIVE and not self.runner.busy(grant.id)
        for button in (self.copy_button, self.qr_button, self.revoke_button):
            button.setEnabled(active)
        free = donation is not None and not self.runner.busy(donation.id)
        self.end_button.setEnabled(free)
        self.retry_button.setEnabled(free and donation is not None and donation.status == DonationStatus.ERROR)
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

        self.runner.run("copy the grant link", self.host.lending.link_of(sel[1]), sel[1], done=copied)

    def ask_revoke(self, grant_id: str) -> None:
        g = self.model.grant(grant_id)
        if g is None:
            return
        dialogs.confirm(
            self, "Revoke grant", f"Revoke the grant “{g.label}”?", "Revoke",
            lambda: self.runner.run(f"revoke {g.label}", self.host.lending.revoke_grant(grant_id), grant_id),
            detail=(f"Its link stops working, and the {g.nodes} node{'s' if g.nodes != 1 else ''} lent under it "
                    "are stopped and deleted, with their work folders. This cannot be undone."),
        )

    def ask_end(self, donation_id: str) -> None:
        d = self.model.donation(donation_id)
        if d is None:
            return
        dialogs.confirm(
            self, "End loan", f"End the loan of this node to {d.party_id}?", "End loan",
            lambda: self.runner.run(f"end the loan of {donation_id}",
                                     self.host.lending.end_loan(donation_id),
                                     donation_id),
            detail="The node is stopped and its work folder (its identity and everything the other cadre "
                   "kept on it) is deleted. This cannot be undone.",
        )

    def retry(self, donation_id: str) -> None:
        self.runner.run(f"retry the lent node {donation_id}", self.host.lending.retry(donation_id),
                         donation_id)


def install_tab(window: QMainWindow, view: LentView, model: LentModel) -> QTabWidget:
    """Put the Lent view in a tab beside what the window shows; returns the tabs."""
    tabs = QTabWidget()
    tabs.setDocumentMode(True)
    nodes = window.takeCentralWidget()
    if nodes is not None:
        tabs.addTab(nodes, "Nodes")
    tabs.addTab(view, "Lent")
    window.setCentralWidget(tabs)
    tabs.currentChanged.connect(lambda index: model.set_ticking(tabs.widget(index) is view and window.isVisible()))
    return tabs
