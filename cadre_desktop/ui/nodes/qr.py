"""The claim QR code, painted from segno's matrix, and the dialog that shows it.

Painted rather than scaled from an image so it stays crisp at any size and
screen scale: every module is a whole number of device pixels, the quiet zone
(4 modules) is kept, and the background is white even on a dark theme, since
phone cameras want dark modules on light.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QFont, QGuiApplication, QPainter
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSizePolicy, QStackedWidget, QVBoxLayout, QWidget

from cadre_desktop import claim_qr
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.nodes.model import NodeTableModel
from cadre_desktop.ui.prefs import dialogs
from cadre_desktop.ui.tray.status import status_words

QUIET_ZONE = 4
#: Small enough that the dialog fits a short screen at 2× (it was 240: the layout then laid the
#: link over the code's bottom and its quiet zone); still read by a phone (tests/ui/test_qr.py).
MINIMUM_SIDE = 160


class QrCode(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._matrix: tuple = ()
        self.setMinimumSize(MINIMUM_SIDE, MINIMUM_SIDE)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def set_url(self, url: str | None) -> None:
        self._matrix = claim_qr.make(url).matrix if url else ()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(320, 320)

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.fillRect(self.rect(), Qt.GlobalColor.white)
        if not self._matrix:
            return
        count = len(self._matrix) + 2 * QUIET_ZONE
        dpr = self.devicePixelRatioF()
        module = max(1, int(min(self.width(), self.height()) * dpr) // count) / dpr
        side = module * count
        x0 = round((self.width() - side) / 2 * dpr) / dpr + QUIET_ZONE * module
        y0 = round((self.height() - side) / 2 * dpr) / dpr + QUIET_ZONE * module
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        for r, row in enumerate(self._matrix):
            c = 0
            while c < len(row):  # one rectangle per run of dark modules
                if not row[c]:
                    c += 1
                    continue
                start = c
                while c < len(row) and row[c]:
                    c += 1
                painter.fillRect(QRectF(x0 + start * module, y0 + r * module, (c - start) * module, module),
                                 Qt.GlobalColor.black)
        painter.end()


class QrDialog(QDialog):
    """Claim one node: its QR code and link; closes itself once the node is claimed."""

    CLOSE_AFTER_MS = 2500

    def __init__(self, node_id: str, model: NodeTableModel, actions: Actions,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.node_id, self.model, self.runner = node_id, model, actions
        self._url: str | None = None
        self.finished_message = ""
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        layout = QVBoxLayout(self)
        self.title = QLabel()
        font = QFont(self.title.font())
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.title.setFont(font)
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.stack = QStackedWidget()
        self.qr = QrCode()
        self.claimed_label = QLabel()
        self.claimed_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.claimed_label.setWordWrap(True)
        self.claimed_label.setFont(font)
        self.stack.addWidget(self.qr)
        self.stack.addWidget(self.claimed_label)
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setToolTip("The claim link, to type on a phone by hand. It holds the claim secret.")
        buttons = QHBoxLayout()
        self.copy = QPushButton("Copy link")
        self.regenerate = QPushButton("New code…")
        self.regenerate.setToolTip("Make a new claim code; the one shown now stops working")
        close = QPushButton("Close")
        close.setDefault(True)
        buttons.addWidget(self.copy)
        buttons.addWidget(self.regenerate)
        buttons.addStretch(1)
        buttons.addWidget(close)
        for widget in (self.title, self.hint, self.stack, self.url):
            layout.addWidget(widget)
        layout.addLayout(buttons)
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self._url or ""))
        self.regenerate.clicked.connect(self._ask_regenerate)
        close.clicked.connect(self.reject)
        model.refreshed.connect(self.update_from_model)
        actions.busy_changed.connect(self.update_from_model)
        self.update_from_model()

    def showEvent(self, event) -> None:  # noqa: N802
        """Never shorter than its content: a top-level is first sized to at most 2/3 of the screen,
        which at 2× on a short screen laid the link over the code and its quiet zone."""
        super().showEvent(event)
        layout = self.layout()
        needed = layout.totalHeightForWidth(self.width()) if layout is not None else self.height()
        screen = self.screen()
        if screen is not None:
            needed = min(needed, screen.availableGeometry().height() - (self.frameGeometry().height() - self.height()))
        if needed > self.height():
            self.resize(self.width(), needed)

    def update_from_model(self, *_) -> None:
        if self.finished_message:
            return
        v = self.model.view(self.node_id)
        if v is None:
            return self._finish("This node was removed.")
        self.setWindowTitle(f"Claim {v.name}")
        self.title.setText(v.name)
        if v.status == NodeStatus.JOINED:
            return self._finish(f"{v.name} was claimed by {v.cadre}." if v.cadre else f"{v.name} was claimed.")
        if v.claim_url != self._url:
            self._url = v.claim_url
            self.qr.set_url(v.claim_url)
            self.url.setText(v.claim_url or "")
            self.url.setCursorPosition(0)
        if v.claim_url and v.ready:
            self.hint.setText("Scan this code with your phone's camera to claim the node into your cadre. "
                              "The phone must be on the same network as this computer.")
        elif v.claim_url:
            self.hint.setText("The node is starting; this code works in a moment.")
        else:
            self.hint.setText(f"This node has no claim code right now ({status_words(v, self.model.now)}).")
        busy = self.runner.busy(self.node_id)
        self.regenerate.setEnabled(v.status == NodeStatus.UNCLAIMED and not busy)
        self.copy.setEnabled(bool(v.claim_url))

    def _finish(self, message: str) -> None:
        self.finished_message = message
        self.claimed_label.setText("✓ " + message if "claimed" in message else message)
        self.stack.setCurrentWidget(self.claimed_label)
        self._url = None
        self.qr.set_url(None)
        for widget in (self.hint, self.url, self.copy, self.regenerate):
            widget.hide()
        QTimer.singleShot(self.CLOSE_AFTER_MS, self, self.accept)

    def _ask_regenerate(self) -> None:
        dialogs.confirm(
            self, "New claim code", "Make a new claim code for this node?", "Make new code",
            lambda: self.runner.regenerate(self.node_id),
            detail="The QR code and link shown now stop working: nobody can claim the node with them.",
        )
