"""The node window: a sortable, filterable table, the selected node's details and actions, its log.

Closing it hides it (the app lives in the tray), except when there is no tray:
then closing it quits, so nothing runs invisibly. Opened from the tray or a
notification it selects the node that needs the person. It fits the screen it
opens on at any scale, and remembers its size and place (`window.json`, 0600).
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from pathlib import Path

from PySide6.QtCore import QByteArray, QRect, QSize, Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QInputDialog, QLabel, QLineEdit, QMainWindow, QPushButton, QSplitter, QStackedWidget, QVBoxLayout, QWidget

from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.host.core.records.records import HELD, SUPERVISED, NodeStatus
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.nodes.details import DetailsPane
from cadre_desktop.ui.nodes.logview import LogView
from cadre_desktop.ui.nodes.model import NodeTableModel
from cadre_desktop.ui.nodes.table import NodeProxy, NodeTable
from cadre_desktop.ui.prefs import dialogs
from cadre_desktop.ui.tray.status import attention_first, needs_attention

log = logging.getLogger(__name__)

PREFERRED = QSize(1100, 620)
MINIMUM = QSize(420, 300)
#: The details pane's share at the default size, at least.
DETAILS_WIDTH = 340
#: The default height when the details go under the table (a narrow screen).
STACKED_HEIGHT = 760
SCREEN_SHARE = 0.9
EMPTY_TEXT = (
    "<h2>No nodes yet</h2>"
    "<p>A node is a program this computer runs for a cadre, a group of peers owned by a person.</p>"
    "<p><b>Add node</b> starts one that waits to be claimed: scan its QR code with your phone "
    "(on the same network) to claim it into your cadre.</p>"
    "<p>If a member of a cadre sent you an invitation, use <b>Join with invitation</b> instead.</p>"
)
STARTING_TEXT = "<h2>Starting…</h2><p>cadre-desktop is reading this home and finding its running nodes.</p>"
#: Where the tray icon is, per platform, for the first start's welcome.
TRAY_PLACE = {
    "darwin": "in the menu bar, at the top right of the screen",
    "win32": "in the notification area at the bottom right, near the clock (it may be behind the ^ arrow)",
}
TRAY_PLACE_OTHER = "in the panel's system tray (the notification area), usually near the clock"


def welcome_text(platform: str = sys.platform) -> str:
    """The first start's words: what a node is, what to press, where the app lives afterwards."""
    return (
        "<b>Welcome to cadre-desktop.</b> A <i>node</i> is a small program this computer runs for a "
        "cadre, a group of peers owned by a person. Press <b>Add node</b> to start one, then scan its "
        "QR code with your phone to claim it.<br>cadre-desktop keeps running in the tray: its icon is "
        f"{TRAY_PLACE.get(platform, TRAY_PLACE_OTHER)}. Click it for this window; its menu has "
        "<i>Add node…</i>, <i>Preferences…</i> and <i>Quit</i>. Closing this window stops nothing."
    )


BUTTONS = (  # attribute, text with its mnemonic, tooltip
    ("add_button", "&Add node…", "Start a new node that waits to be claimed (Ctrl+N)"),
    ("join_button", "&Join with invitation…", "Start a new node that joins a cadre with an invitation"),
    ("qr_button", "Show &QR", "Show the claim QR code of the selected node (Enter)"),
    ("retry_button", "&Retry", "Try again a node the host gave up on, with a fresh budget (Ctrl+R)"),
    ("restart_button", "Re&start", "Stop and start the node; does not count as a failed attempt (Ctrl+R)"),
    ("pause_button", "&Pause", "Stop the node and keep it stopped until you resume it; spends nothing"),
    ("remove_button", "Re&move…", "Remove the node and its work folder (Delete)"),
    ("move_button", "Mo&ve to…", "Move the node to another computer of the fleet, with its identity and claim"),
    ("log_button", "View &log", "Show the selected node's whole log"),
    ("copy_button", "&Copy claim link", "Copy the claim link; it holds the claim secret"),
    ("invite_button", "Add a&nother node…", "Start a new node that joins this node's cadre; no token to copy"),
)


BUTTON_TIPS = {attr: tip for attr, _, tip in BUTTONS}


def fit_rect(wanted: QRect, available: QRect, minimum: QSize = MINIMUM) -> QRect:
    """`wanted`, shrunk to fit `available` and moved inside it (a saved place on a screen since gone)."""
    width = max(min(wanted.width(), available.width()), min(minimum.width(), available.width()))
    height = max(min(wanted.height(), available.height()), min(minimum.height(), available.height()))
    x = min(max(wanted.x(), available.left()), available.right() + 1 - width)
    y = min(max(wanted.y(), available.top()), available.bottom() + 1 - height)
    return QRect(x, y, width, height)


class NodeWindow(QMainWindow):
    add_requested = Signal()
    join_requested = Signal()
    qr_requested = Signal(str)
    #: Closed while there is no tray: the app should quit.
    quit_requested = Signal()
    # Made from BUTTONS by `_make_banner_and_buttons`.
    add_button: QPushButton
    join_button: QPushButton
    qr_button: QPushButton
    retry_button: QPushButton
    restart_button: QPushButton
    pause_button: QPushButton
    remove_button: QPushButton
    move_button: QPushButton
    log_button: QPushButton
    copy_button: QPushButton
    invite_button: QPushButton

    def __init__(self, host, model: NodeTableModel, actions: Actions, state_file: Path | None = None) -> None:
        super().__init__()
        self.host, self.model, self.runner = host, model, actions
        self.state_file = state_file
        self.quit_on_close = False
        self.closing = False
        self._placed = False
        self.setWindowTitle("Nodes — cadre-desktop")
        self.setMinimumSize(MINIMUM)
        self._make_banner_and_buttons()
        split = self._make_panes()
        self._make_pages(split)
        self._make_central()
        self._add_shortcuts()
        self._connect_buttons()
        self._follow_selection_and_model()
        self.update_buttons()

    # -- building -----------------------------------------------------------------------
    # Called in this order: the order in which widgets join the window is its Tab order.

    def _make_banner_and_buttons(self) -> None:
        """The no-tray banner (hidden until needed) and every button of `BUTTONS`, unplaced."""
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextFormat(Qt.TextFormat.RichText)
        self.banner.setStyleSheet("QLabel { background: #fff4ce; color: #3d3000; padding: 8px; }")
        self.banner.hide()
        self.welcome = QLabel()
        self.welcome.setWordWrap(True)
        self.welcome.setTextFormat(Qt.TextFormat.RichText)
        self.welcome.setStyleSheet("QLabel { background: #e8f1fb; color: #0b2e4f; padding: 8px; }")
        self.welcome.hide()
        self.welcome_button = QPushButton("&Got it")
        self.welcome_button.setToolTip("Hide this welcome")
        self.welcome_button.hide()
        self.welcome_button.clicked.connect(self.hide_welcome)
        for attr, text, tip in BUTTONS:
            button = QPushButton(text)
            button.setToolTip(tip)
            setattr(self, attr, button)
        self.log_button.setCheckable(True)

    def _make_panes(self) -> QSplitter:
        """The table beside the details, above the (hidden) log; returns the outer splitter."""
        self.proxy = NodeProxy(self.model, self)
        self.table = NodeTable(self.proxy)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter nodes (Ctrl+F)")
        self.filter.setClearButtonEnabled(True)
        self.filter.setToolTip("Show only nodes whose name, status, cadre, address or id contains this")
        # The placeholder whole, with room for the clear button and the frame.
        self.filter.setMinimumWidth(self.filter.fontMetrics().horizontalAdvance(self.filter.placeholderText())
                                    + self.filter.sizeHint().height() + 24)
        self.details = DetailsPane(self.model)
        self.log = LogView(self.host)
        self.log.hide()
        across = QSplitter(Qt.Orientation.Horizontal)
        across.addWidget(self.table)
        across.addWidget(self.details)
        across.setStretchFactor(0, 3)
        across.setStretchFactor(1, 2)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(across)
        split.addWidget(self.log)
        self.splitters = (across, split)
        return split

    def _make_pages(self, split: QSplitter) -> None:
        """The table page (panes and the selected node's buttons) and the empty page that explains."""
        node_row = QHBoxLayout()
        for button in (self.qr_button, self.retry_button, self.restart_button, self.pause_button, self.move_button,
                       self.remove_button, self.log_button, self.copy_button, self.invite_button):
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

    def _make_central(self) -> None:
        """Banner, the add/join/filter row, then the pages."""
        top_row = QHBoxLayout()
        top_row.addWidget(self.add_button)
        top_row.addWidget(self.join_button)
        top_row.addStretch(1)
        top_row.addWidget(self.filter)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.addWidget(self.banner)
        welcome_row = QHBoxLayout()
        welcome_row.addWidget(self.welcome, 1)
        welcome_row.addWidget(self.welcome_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(welcome_row)
        layout.addLayout(top_row)
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(central)

    def _add_shortcuts(self) -> None:
        for text, keys, slot in (("Add node…", QKeySequence.StandardKey.New, self.add_requested.emit),
                                 ("Close", QKeySequence.StandardKey.Close, self.close),
                                 ("Filter", QKeySequence.StandardKey.Find, self.filter.setFocus),
                                 ("Retry or restart", QKeySequence("Ctrl+R"), self.retry_or_restart)):
            action = QAction(text, self)
            action.setShortcut(keys)
            action.triggered.connect(slot)
            self.addAction(action)

    def _connect_buttons(self) -> None:
        actions = self.runner
        self.add_button.clicked.connect(self.add_requested.emit)
        self.join_button.clicked.connect(self.join_requested.emit)
        self.qr_button.clicked.connect(lambda: self._with_selected(self.qr_requested.emit))
        self.retry_button.clicked.connect(lambda: self._with_selected(actions.retry))
        self.restart_button.clicked.connect(lambda: self._with_selected(actions.restart))
        self.pause_button.clicked.connect(lambda: self._with_selected(self._pause_or_resume))
        self.remove_button.clicked.connect(lambda: self._with_selected(self.ask_remove))
        self.move_button.clicked.connect(lambda: self._with_selected(self.ask_move))
        self.copy_button.clicked.connect(self._copy_link)
        self.invite_button.clicked.connect(lambda: self._with_selected(self.ask_invite))
        self.log_button.toggled.connect(self.log.setVisible)

    def _follow_selection_and_model(self) -> None:
        """The buttons follow the filter, the selection, the model and what is busy; the table opens."""
        self.filter.textChanged.connect(self._filter)
        self.table.selectionModel().selectionChanged.connect(self.update_buttons)
        self.table.doubleClicked.connect(lambda _: self._with_selected(self._open_default))
        self.table.open_requested.connect(lambda: self._with_selected(self._open_default))
        self.table.remove_requested.connect(lambda: self._with_selected(self.ask_remove))
        self.model.refreshed.connect(self.update_buttons)
        self.proxy.rowsInserted.connect(self._select_first_if_none)
        self.runner.busy_changed.connect(self.update_buttons)

    # -- selection ---------------------------------------------------------------------

    def selected_id(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].data(Qt.ItemDataRole.UserRole) if rows else None

    def select(self, node_id: str) -> bool:
        row = self.model.row_of(node_id)
        if row < 0:
            return False
        index = self.proxy.mapFromSource(self.model.index(row, 0))
        if not index.isValid():  # filtered out: show it anyway
            self.filter.clear()
            index = self.proxy.mapFromSource(self.model.index(row, 0))
        self.table.selectRow(index.row())
        self.table.scrollTo(index)
        return True

    def _select_first_if_none(self, *_) -> None:
        if self.selected_id() is None and (row := self.table.first_node_row()) is not None:
            self.table.selectRow(row)

    def _filter(self, text: str) -> None:
        self.proxy.set_filter(text)
        self._select_first_if_none()
        self.update_buttons()

    def _with_selected(self, act) -> None:
        node_id = self.selected_id()
        if node_id is not None:
            act(node_id)

    def update_buttons(self, *_) -> None:
        self.pages.setCurrentWidget(self.table_page if self.model.node_count() else self.empty_page)
        self.table.say_no_match(self.filter.text())
        node_id = self.selected_id()
        v = self.model.view(node_id) if node_id else None
        ready = v is not None and not self.runner.busy(v.id)
        status = v.status if v is not None else None
        claim_url = v.claim_url if v is not None else None
        self.qr_button.setEnabled(ready and status == NodeStatus.UNCLAIMED and bool(claim_url))
        self.retry_button.setEnabled(ready and status == NodeStatus.ERROR)
        self.restart_button.setEnabled(ready and status in SUPERVISED)
        held = status in HELD
        self.pause_button.setEnabled(ready and (held or status in SUPERVISED))
        self.pause_button.setText("Res&ume" if held else "&Pause")
        self.pause_button.setToolTip("Start the node now; its attempts are untouched" if held else BUTTON_TIPS["pause_button"])
        self.remove_button.setEnabled(ready)
        self.move_button.setVisible(bool(others := self._other_computers(v)))  # a computer in no fleet has nowhere to move a node
        self.move_button.setEnabled(ready and bool(others) and bool(v and v.ready) and status in (NodeStatus.UNCLAIMED, NodeStatus.JOINED))
        self.copy_button.setEnabled(ready and bool(claim_url))
        self.invite_button.setEnabled(ready and status == NodeStatus.JOINED)
        cadre = v.cadre if v is not None and v.status == NodeStatus.JOINED and v.cadre else None
        self.invite_button.setText(f'Add a&nother node to "{cadre}"…' if cadre else "Add a&nother node…")
        self.log_button.setEnabled(v is not None)
        self.log.follow(node_id)
        if self.details.node_id != node_id:
            self.details.show_node(node_id)

    # -- actions -----------------------------------------------------------------------

    def retry_or_restart(self) -> None:
        if self.retry_button.isEnabled():
            self.retry_button.click()
        elif self.restart_button.isEnabled():
            self.restart_button.click()

    def _pause_or_resume(self, node_id: str) -> None:
        v = self.model.view(node_id)
        if v is not None:
            (self.runner.resume if v.status in HELD else self.runner.pause)(node_id)

    def ask_invite(self, node_id: str) -> None:
        """Name the new node (optional); the host gets the invitation from the node itself."""
        v = self.model.view(node_id)
        if v is None or v.status != NodeStatus.JOINED:
            return
        name, ok = QInputDialog.getText(self, "Add another node",
                                        f'A new node joins "{v.cadre}". Its name (optional):')
        if ok:
            self.runner.invite(node_id, name.strip() or None)

    def _other_computers(self, v) -> list:  # where a node could move: every paired computer but the one hosting it
        fleet, here = getattr(self.host, "fleet", None), (v.computer or {}).get("id") if v is not None else None
        return [c for c in (fleet.doc.computers if fleet is not None else ()) if c.id != here]

    def ask_move(self, node_id: str) -> None:
        computers = self._other_computers(v := self.model.view(node_id))
        labels = [f"{c.name} ({c.id})" for c in computers]
        if v is None or not labels or self.runner.busy(node_id):
            return
        chosen, ok = QInputDialog.getItem(self, "Move to…", f"Move {v.name} to:", labels, 0, False)
        if ok and chosen in labels:
            self.runner.move(node_id, computers[labels.index(chosen)].id)

    def ask_remove(self, node_id: str) -> None:
        v = self.model.view(node_id)
        if v is None or self.runner.busy(node_id):
            return
        folder = f"on {self.model.computer_label(v)}" if self.model.is_remote(node_id) else self.host.paths.node_dir(node_id)
        dialogs.confirm(
            self, "Remove node", f"Remove {self.model.label(v)}?", "Remove", lambda: self.runner.remove(node_id),
            detail=(f"Its program is stopped, and its work folder ({folder}), "
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
        if not self._placed:
            self._place()
        self._select_first_if_none()  # a window built after the nodes were added has had no insert
        self.show()
        if self.isMinimized():
            self.showNormal()
        self.raise_()
        self.activateWindow()

    def present_attention(self) -> None:
        """Opened from the tray: the node that needs the person first, else what was selected."""
        self.present()
        first = next(iter(attention_first(self.model.views())), None)
        if first is not None and needs_attention(first):
            self.select(first.id)
        self.table.setFocus()

    def show_node(self, node_id: str) -> None:
        self.present()
        self.select(node_id)
        self.table.setFocus()
        log.info("window opened on node %s", node_id)

    def explain_no_tray(self, text: str) -> None:
        self.banner.setText(text)
        self.banner.show()
        self.quit_on_close = True

    def show_welcome(self) -> None:
        """The first start: say what a node is, what to press and where the tray icon is."""
        self.welcome.setText(welcome_text())
        self.welcome.show()
        self.welcome_button.show()
        self.add_button.setFocus()

    def hide_welcome(self) -> None:
        self.welcome.hide()
        self.welcome_button.hide()

    def set_starting(self, on: bool) -> None:
        """While the host starts, the page shown without nodes says so (not "No nodes yet")."""
        self.empty_page.setText(STARTING_TEXT if on else EMPTY_TEXT)

    def tray_found(self) -> None:
        self.banner.hide()
        self.quit_on_close = False

    # -- size and place ---------------------------------------------------------------------

    def _place(self, available: QRect | None = None) -> None:
        """The saved size and place, else the default size, on `available` (the screen's free area)."""
        self._placed = True
        if available is None:
            screen = self.screen() or QGuiApplication.primaryScreen()
            available = screen.availableGeometry() if screen else QRect(0, 0, PREFERRED.width(), PREFERRED.height())
        saved = self._saved_geometry()
        if saved is not None and self.restoreGeometry(saved):
            wanted = self.geometry()
        else:
            wanted = self.default_rect(available)
        placed = fit_rect(wanted, available, self.minimumSize())
        self.setGeometry(placed)
        across = self.splitters[0]
        if self._side_by_side_fits(placed.width()):
            across.setOrientation(Qt.Orientation.Horizontal)
            share = placed.width() * 11 // 20
            table = share if saved is not None else min(self.table.wanted_width(),
                                                        placed.width() - DETAILS_WIDTH - 40)
            across.setSizes([table, max(placed.width() - table, 1)])
        else:  # too narrow for every column beside the details: the details go under the table
            across.setOrientation(Qt.Orientation.Vertical)
            across.setSizes([placed.height() * 9 // 20, placed.height() * 11 // 20])

    def _side_by_side_fits(self, width: int) -> bool:
        return width >= self.table.wanted_width() + DETAILS_WIDTH + 40  # the splitter's handle and the margins

    def default_rect(self, available: QRect) -> QRect:
        """Wide enough for every column and the details beside them, else (a narrow screen) every
        column with the details under them; as far as the screen allows, centred."""
        share = QSize(int(available.width() * SCREEN_SHARE), int(available.height() * SCREEN_SHARE))
        width = self.table.wanted_width() + DETAILS_WIDTH + 40
        height = PREFERRED.height() if width <= share.width() else STACKED_HEIGHT
        size = QSize(max(width, PREFERRED.width()), height).boundedTo(share)
        return QRect(available.center().x() - size.width() // 2, available.center().y() - size.height() // 2,
                     size.width(), size.height())

    def _saved_geometry(self) -> QByteArray | None:
        try:
            doc = json.loads(self.state_file.read_text(encoding="utf-8")) if self.state_file else None
            return QByteArray(base64.b64decode(doc["geometry"], validate=True)) if isinstance(doc, dict) else None
        except (OSError, ValueError, KeyError, TypeError):
            return None  # no saved place, or one we cannot read: a fresh one does no harm

    def save_geometry(self) -> None:
        if self.state_file is None or not self._placed:
            return
        doc = {"version": 1, "geometry": base64.b64encode(bytes(self.saveGeometry().data())).decode()}
        try:
            write_json_atomic(self.state_file, doc)
        except OSError as exc:
            log.warning("cannot remember the window's place in %s: %s", self.state_file, exc)

    # -- events -----------------------------------------------------------------------------

    def showEvent(self, event) -> None:  # noqa: N802
        self.model.set_ticking(True)
        super().showEvent(event)

    def hideEvent(self, event) -> None:  # noqa: N802
        self.save_geometry()
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
