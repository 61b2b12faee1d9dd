"""The node window: the table, the selected node's actions, its log, and an empty state.

Closing it hides it (the app lives in the tray), except when there is no tray:
then closing it quits, so nothing runs invisibly.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QMainWindow, QPushButton, QSplitter, QStackedWidget,
    QTableView, QVBoxLayout, QWidget,
)

from cadre_desktop.ui import dialogs
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.logview import LogView
from cadre_desktop.ui.model import COLUMNS, ERROR, NodeTableModel

log = logging.getLogger(__name__)

EMPTY_TEXT = (
    "<h2>No nodes yet</h2>"
    "<p>A node is a program this computer runs for a cadre, a group of peers owned by a person.</p>"
    "<p><b>Add node</b> starts one that waits to be claimed: scan its QR code with your phone "
    "(on the same network) to claim it into your cadre.</p>"
    "<p>If a member of a cadre sent you an invitation, use <b>Join with invitation</b> instead.</p>"
)


class NodeWindow(QMainWindow):
    add_requested = Signal()
    join_requested = Signal()
    qr_requested = Signal(str)
    #: Closed while there is no tray: the app should quit.
    quit_requested = Signal()

    def __init__(self, host, model: NodeTableModel, actions: Actions) -> None:
        super().__init__()
        self.host, self.model, self.actions = host, model, actions
        self.quit_on_close = False
        self.closing = False
        self.setWindowTitle("Nodes — cadre-desktop")
        self.resize(980, 520)

        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextFormat(Qt.TextFormat.RichText)
        self.banner.setStyleSheet("QLabel { background: #fff4ce; color: #3d3000; padding: 8px; }")
        self.banner.hide()

        self.add_button = QPushButton("Add node…")
        self.join_button = QPushButton("Join with invitation…")
        self.qr_button = QPushButton("Show QR")
        self.retry_button = QPushButton("Retry")
        self.restart_button = QPushButton("Restart")
        self.remove_button = QPushButton("Remove…")
        self.log_button = QPushButton("View log")
        self.log_button.setCheckable(True)
        self.copy_button = QPushButton("Copy claim link")
        self.retry_button.setToolTip("Try again a node the host gave up on")
        self.restart_button.setToolTip("Stop and start the node; does not count as a failed attempt")

        self.table = QTableView()
        self.table.setModel(model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        for col in range(len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(ERROR, QHeaderView.ResizeMode.Stretch)
        self.log = LogView(host)
        self.log.hide()
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.log)

        node_row = QHBoxLayout()
        for button in (self.qr_button, self.retry_button, self.restart_button, self.remove_button,
                       self.log_button, self.copy_button):
            node_row.addWidget(button)
        node_row.addStretch(1)
        table_page = QWidget()
        table_layout = QVBoxLayout(table_page)
        table_layout.setContentsMargins(0, 0, 0, 0)
        table_layout.addWidget(split, 1)
        table_layout.addLayout(node_row)

        empty_page = QLabel(EMPTY_TEXT)
        empty_page.setWordWrap(True)
        empty_page.setAlignment(Qt.AlignmentFlag.AlignCenter)
        empty_page.setMargin(24)
        self.pages = QStackedWidget()
        self.pages.addWidget(empty_page)
        self.pages.addWidget(table_page)
        self.empty_page, self.table_page = empty_page, table_page

        top_row = QHBoxLayout()
        top_row.addWidget(self.add_button)
        top_row.addWidget(self.join_button)
        top_row.addStretch(1)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.addWidget(self.banner)
        layout.addLayout(top_row)
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(central)

        for text, keys, slot in (("Add node…", QKeySequence.StandardKey.New, self.add_requested.emit),
                                 ("Close", QKeySequence.StandardKey.Close, self.close)):
            action = QAction(text, self)
            action.setShortcut(keys)
            action.triggered.connect(slot)
            self.addAction(action)

        self.add_button.clicked.connect(self.add_requested.emit)
        self.join_button.clicked.connect(self.join_requested.emit)
        self.qr_button.clicked.connect(lambda: self._with_selected(self.qr_requested.emit))
        self.retry_button.clicked.connect(lambda: self._with_selected(actions.retry))
        self.restart_button.clicked.connect(lambda: self._with_selected(actions.restart))
        self.remove_button.clicked.connect(lambda: self._with_selected(self.ask_remove))
        self.copy_button.clicked.connect(self._copy_link)
        self.log_button.toggled.connect(self.log.setVisible)
        self.table.selectionModel().selectionChanged.connect(self.update_buttons)
        self.table.doubleClicked.connect(lambda _: self._with_selected(self._open_default))
        model.refreshed.connect(self.update_buttons)
        model.rowsInserted.connect(self._select_first_if_none)
        actions.busy_changed.connect(self.update_buttons)
        self.update_buttons()

    # -- selection ---------------------------------------------------------------------

    def selected_id(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        v = self.model.view_at(rows[0].row()) if rows else None
        return v.id if v else None

    def select(self, node_id: str) -> None:
        row = self.model.row_of(node_id)
        if row >= 0:
            self.table.selectRow(row)

    def _select_first_if_none(self, *_) -> None:
        if self.selected_id() is None and self.model.rowCount():
            self.table.selectRow(0)

    def _with_selected(self, act) -> None:
        node_id = self.selected_id()
        if node_id is not None:
            act(node_id)

    def update_buttons(self, *_) -> None:
        self.pages.setCurrentWidget(self.table_page if self.model.rowCount() else self.empty_page)
        node_id = self.selected_id()
        v = self.model.view(node_id) if node_id else None
        ready = v is not None and not self.actions.busy(v.id)
        self.qr_button.setEnabled(ready and v.status == "unclaimed" and bool(v.claim_url))
        self.retry_button.setEnabled(ready and v.status == "error")
        self.restart_button.setEnabled(ready and v.status in ("unclaimed", "joining", "joined"))
        self.remove_button.setEnabled(ready)
        self.copy_button.setEnabled(ready and bool(v.claim_url))
        self.log_button.setEnabled(v is not None)
        self.log.follow(node_id)

    # -- actions -----------------------------------------------------------------------

    def ask_remove(self, node_id: str) -> None:
        v = self.model.view(node_id)
        if v is None:
            return
        dialogs.confirm(
            self, "Remove node", f"Remove {v.name}?", "Remove",
            lambda: self.actions.remove(node_id),
            detail=(f"Its program is stopped, and its work folder ({self.host.paths.node_dir(node_id)}), "
                    "which holds the identity its cadre knows, is deleted with its claim secret. "
                    "This cannot be undone."),
        )

    def _copy_link(self) -> None:
        v = self.model.view(self.selected_id() or "")
        if v is not None and v.claim_url:
            QGuiApplication.clipboard().setText(v.claim_url)
            self.statusBar().showMessage("Claim link copied. It holds the claim secret: share it with care.", 5000)

    def _open_default(self, node_id: str) -> None:
        v = self.model.view(node_id)
        if v is not None and v.claim_url:
            self.qr_requested.emit(node_id)
        else:
            self.log_button.setChecked(True)

    # -- showing ------------------------------------------------------------------------

    def present(self) -> None:
        self.show()
        if self.isMinimized():
            self.showNormal()
        self.raise_()
        self.activateWindow()

    def show_node(self, node_id: str) -> None:
        self.present()
        self.select(node_id)
        log.info("window opened on node %s", node_id)

    def explain_no_tray(self, text: str) -> None:
        self.banner.setText(text)
        self.banner.show()
        self.quit_on_close = True

    def showEvent(self, event) -> None:  # noqa: N802
        self.model.set_ticking(True)
        super().showEvent(event)

    def hideEvent(self, event) -> None:  # noqa: N802
        self.model.set_ticking(False)
        super().hideEvent(event)

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.closing:
            event.accept()
        elif self.quit_on_close:
            event.ignore()
            self.quit_requested.emit()
        else:
            event.ignore()
            self.hide()
