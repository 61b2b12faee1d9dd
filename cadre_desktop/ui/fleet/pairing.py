"""*Add a computer…* and *Join computers…*: pairing this computer into a fleet by a code.

The shell makes `FleetUi` at start; the dialogs and the QR widget (segno) load when first shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QLineEdit, QVBoxLayout, QWidget

from cadre_desktop.ui.actions import Actions


def qr_text(invite: dict[str, Any]) -> str:
    """What the code's QR holds: the command a person would type on the other computer."""
    return f"cadre-desktop fleet join {invite['code']} {invite['address']}"


class InviteDialog(QDialog):
    """The code, where to send it, until when; its QR code for the other computer's camera."""

    def __init__(self, parent: QWidget | None, invite: dict[str, Any]) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a computer")
        layout = QVBoxLayout(self)
        intro = QLabel("On the other computer, choose <b>Join computers…</b> and type this code and address "
                       "(or run the command under the code). The code works once, for 10 minutes.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.code = QLabel(str(invite["code"]))
        self.code.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = self.code.font()
        font.setPointSize(font.pointSize() * 2)
        self.code.setFont(font)
        self.code.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.code)
        self.address = QLabel(f"Address: {invite['address']}  ·  valid until {str(invite['expires_at'])[11:16]} UTC")
        self.address.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.address)
        from cadre_desktop.ui.nodes.qr import QrCode

        self.qr = QrCode()
        self.qr.set_url(qr_text(invite))
        layout.addWidget(self.qr)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)


class JoinComputersDialog(QDialog):
    def __init__(self, parent: QWidget | None, then: Callable[[str, str], object]) -> None:
        super().__init__(parent)
        self.setWindowTitle("Join computers")
        layout = QVBoxLayout(self)
        intro = QLabel("On a computer of your fleet, choose <b>Add a computer…</b>; type here the code and "
                       "the address it shows.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.code = QLineEdit()
        self.code.setPlaceholderText("code, like 7-ab3k-9qzp")
        self.code.setMaxLength(40)
        self.address = QLineEdit()
        self.address.setPlaceholderText("address, like 192.168.1.20:28091")
        self.address.setMaxLength(300)
        layout.addWidget(self.code)
        layout.addWidget(self.address)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setText("&Join")
        ok.setEnabled(False)

        def typed() -> None:
            ok.setEnabled(bool(self.code.text().strip() and self.address.text().strip()))

        self.code.textChanged.connect(typed)
        self.address.textChanged.connect(typed)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.accepted.connect(lambda: then(self.code.text().strip(), self.address.text().strip()))


class FleetUi(QObject):
    """The two dialogs, their work run through the tray's actions."""

    def __init__(self, host, actions: Actions, parent_widget: Callable[[], QWidget | None] = lambda: None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.actions = actions
        self._parent = parent_widget
        self.dialogs: list[QDialog] = []

    def _keep(self, dialog: QDialog) -> QDialog:
        from cadre_desktop.ui.prefs.dialogs import open_dialog

        self.dialogs.append(dialog)
        dialog.destroyed.connect(lambda _=None, d=dialog: self.dialogs.remove(d) if d in self.dialogs else None)
        return open_dialog(dialog)

    def ask_add_computer(self) -> None:
        def show(invite: dict[str, Any]) -> None:
            self._keep(InviteDialog(self._parent(), invite))

        self.actions.run("make a pairing code", self.host.fleet.invite(), done=show)

    def ask_join_computers(self) -> None:
        self._keep(JoinComputersDialog(self._parent(), self.join))

    def join(self, code: str, address: str) -> None:
        self.actions.run("pair with the other computer", self.host.fleet.join(code, address), done=self._joined)

    def _joined(self, doc: dict[str, Any]) -> None:
        paired = doc.get("paired", {})
        from PySide6.QtWidgets import QMessageBox

        box = QMessageBox(QMessageBox.Icon.Information, "Computers paired",
                          f"This computer is paired with {paired.get('name')}.", parent=self._parent())
        self._keep(box)
