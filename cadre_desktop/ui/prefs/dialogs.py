"""Small questions: confirm, a node's name, an invitation.

All non-modal (`open()`, never `exec()`), answering through a callback: a nested
event loop started from inside an asyncio callback would re-enter the loop.
Tests patch `confirm` to answer for the user.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QMessageBox, QPlainTextEdit, QVBoxLayout, QWidget


def confirm(parent: QWidget | None, title: str, text: str, yes: str, then: Callable[[], object],
            detail: str = "") -> QMessageBox:
    """Ask; call `then()` only if the person picks `yes`. Cancel is the default."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text, QMessageBox.StandardButton.Cancel, parent)
    if detail:
        box.setInformativeText(detail)
    ok = box.addButton(yes, QMessageBox.ButtonRole.DestructiveRole)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.finished.connect(lambda _: then() if box.clickedButton() is ok else None)
    box.open()
    return box


QUIT_STOP, QUIT_LEAVE = "&Stop nodes and quit", "&Leave them running"


def ask_how_to_quit(parent: QWidget | None, running: int, keep_default: bool,
                    then: Callable[[bool, bool], None]) -> QMessageBox:
    """Quit: stop the nodes, or leave them running? `then(keep_running, ask_again)`; Cancel quits nothing.

    The two answers are the Yes and No roles and Cancel the Reject role, so every platform's
    button order (Windows, macOS, KDE, GNOME) keeps the two answers side by side and Cancel
    outside them (two Accept buttons put Cancel between them under a GTK theme). The default
    button is the preference's answer; the preference changes only by *Don't ask again*."""
    nodes = f"{running} node{'s' if running != 1 else ''}"
    box = QMessageBox(QMessageBox.Icon.Question, "Quit cadre-desktop",
                      f"Stop the {nodes} too, or leave {'them' if running != 1 else 'it'} running?",
                      QMessageBox.StandardButton.NoButton, parent)
    box.setInformativeText("Left running, they keep serving their cadres, and the next start of "
                           "cadre-desktop takes them back. Stopped, they start again with it.")
    stop = box.addButton(QUIT_STOP, QMessageBox.ButtonRole.YesRole)
    leave = box.addButton(QUIT_LEAVE, QMessageBox.ButtonRole.NoRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setEscapeButton(cancel)
    box.setDefaultButton(leave if keep_default else stop)
    remember = QCheckBox("&Don't ask again (Preferences can change it)")
    box.setCheckBox(remember)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    def answered(_: int) -> None:
        if box.clickedButton() in (stop, leave):
            then(box.clickedButton() is leave, not remember.isChecked())
    box.finished.connect(answered)
    box.open()
    return box


class _Form(QDialog):
    def __init__(self, parent: QWidget | None, title: str, intro: str, ok: str = "OK") -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        layout = QVBoxLayout(self)
        text = QLabel(intro)
        text.setWordWrap(True)
        layout.addWidget(text)
        self.form = QFormLayout()
        layout.addLayout(self.form)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText(ok)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)


class AddDialog(_Form):
    def __init__(self, parent: QWidget | None, then: Callable[[str | None], object]) -> None:
        super().__init__(parent, "Add node", "A new node starts on this computer and waits to be "
                         "claimed: scan its QR code with your phone to claim it into your cadre.", "&Add")
        self.name = QLineEdit()
        self.name.setPlaceholderText("optional, e.g. Living room")
        self.name.setMaxLength(64)
        self.form.addRow("Name:", self.name)
        self.name.setFocus()
        self.accepted.connect(lambda: then(self.name.text().strip() or None))


class JoinDialog(_Form):
    def __init__(self, parent: QWidget | None, then: Callable[[str, str | None], object]) -> None:
        super().__init__(parent, "Join with invitation", "Paste the invitation a member of the cadre sent "
                         "you. A new node starts on this computer and joins their cadre with it.", "&Join")
        self.invitation = QPlainTextEdit()
        self.invitation.setPlaceholderText("the invitation text")
        self.invitation.setTabChangesFocus(True)
        self.name = QLineEdit()
        self.name.setPlaceholderText("optional")
        self.name.setMaxLength(64)
        self.form.addRow("Invitation:", self.invitation)
        self.form.addRow("Name:", self.name)
        self.invitation.setFocus()
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(False)
        self.invitation.textChanged.connect(lambda: ok.setEnabled(bool(self.invitation.toPlainText().strip())))
        self.accepted.connect(lambda: then(self.invitation.toPlainText().strip(), self.name.text().strip() or None))


def open_dialog(dialog: QDialog) -> QDialog:
    """Show a form that deletes itself when closed."""
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog
