"""Lend nodes: the form that makes a grant, then its link as a QR code and as text.

Non-modal like every dialog here. The link carries the grant's token, so the
dialog says so next to it; the QR code is the claim QR's own widget (crisp at
any size, white quiet zone).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from cadre_desktop.ui.nodes.qr import QrCode

EXPIRIES = (("Never", None), ("In 1 day", 86400), ("In 7 days", 7 * 86400), ("In 30 days", 30 * 86400),
            ("In 1 year", 365 * 86400))
LINK_HINT = ("Give this link (or let them scan the code) to the owner of the cadre you lend to, and to nobody "
             "else: it lets its holder ask this computer for nodes. You can revoke it at any time.")


class GrantDialog(QDialog):
    """Make a grant (`create`), or show an existing grant's link (`show_link`)."""

    def __init__(self, parent: QWidget | None, max_nodes: int,
                 create: Callable[[GrantDialog, str | None, int, int | None], None]) -> None:
        super().__init__(parent)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle("Lend nodes")
        self._create = create
        self.link_text = ""
        self.pages = QStackedWidget()
        self.form_page = self._make_form_page(max_nodes)
        self.link_page = self._make_link_page()
        self.pages.addWidget(self.form_page)
        self.pages.addWidget(self.link_page)
        layout = QVBoxLayout(self)
        layout.addWidget(self.pages)
        self.label.setFocus()

    def _make_form_page(self, max_nodes: int) -> QWidget:
        """Who the grant is for, how many nodes, when it expires; *Make grant*."""
        form_page = QWidget()
        form_layout = QVBoxLayout(form_page)
        intro = QLabel("Lend nodes of this computer to a cadre that is not yours. Their software asks for nodes "
                       "with the link this makes; each runs here for them until you end the loan.")
        intro.setWordWrap(True)
        form_layout.addWidget(intro)
        form_layout.addLayout(self._make_form(max_nodes))
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.make_button = self.buttons.addButton("Make grant", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setAutoDefault(False)
        self.buttons.accepted.connect(self._make)
        self.buttons.rejected.connect(self.reject)
        form_layout.addWidget(self.buttons)
        return form_page

    def _make_form(self, max_nodes: int) -> QFormLayout:
        form = QFormLayout()
        self.label = QLineEdit()
        self.label.setPlaceholderText("who it is for, e.g. Alice's cadre")
        self.label.setMaxLength(64)
        self.max_nodes = QSpinBox()
        self.max_nodes.setRange(1, max(1, max_nodes))
        self.max_nodes.setValue(min(2, max(1, max_nodes)))
        self.expiry = QComboBox()
        for text, seconds in EXPIRIES:
            self.expiry.addItem(text, seconds)
        form.addRow("For:", self.label)
        form.addRow("Nodes at most:", self.max_nodes)
        form.addRow("Expires:", self.expiry)
        return form

    def _make_link_page(self) -> QWidget:
        """The grant's label, what the link is, its QR code, the link; *Copy link* and *Close*."""
        link_page = QWidget()
        link_layout = QVBoxLayout(link_page)
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.PlainText)  # the owner's label, shown as typed
        font = self.title.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.2)
        self.title.setFont(font)
        self.hint = QLabel(LINK_HINT)
        self.hint.setWordWrap(True)
        self.qr = QrCode()
        self.link = QLineEdit()
        self.link.setReadOnly(True)
        self.link.setToolTip("The grant link. It holds the grant's token.")
        for widget in (self.title, self.hint, self.qr, self.link):
            link_layout.addWidget(widget)
        link_layout.addLayout(self._make_link_buttons())
        return link_page

    def _make_link_buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.copy = QPushButton("Copy link")
        close = QPushButton("Close")
        close.setAutoDefault(False)  # the default only once its page shows (see show_link)
        self.close_button = close
        row.addWidget(self.copy)
        row.addStretch(1)
        row.addWidget(close)
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.link_text))
        close.clicked.connect(self.accept)
        return row

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        # Return in the form makes the grant (the button box picks its own default when shown).
        if self.pages.currentWidget() is self.form_page:
            self.make_button.setDefault(True)

    def _make(self) -> None:
        self.make_button.setEnabled(False)
        label = self.label.text().strip() or None
        self._create(self, label, self.max_nodes.value(), self.expiry.currentData())

    def failed(self) -> None:
        """The grant could not be made (the error is shown elsewhere): the form can be tried again."""
        self.make_button.setEnabled(True)

    def show_link(self, label: str, link: str) -> None:
        self.setWindowTitle(f"Grant link — {label}")
        self.title.setText(label)
        self.link_text = link
        self.link.setText(link)
        self.link.setCursorPosition(0)
        self.qr.set_url(link)
        self.pages.setCurrentWidget(self.link_page)
        self.make_button.setDefault(False)
        self.close_button.setDefault(True)
        self.adjustSize()
