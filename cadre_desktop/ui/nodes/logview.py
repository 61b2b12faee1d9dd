"""A node's log, its last lines, following what is appended while it is shown."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from cadre_desktop.errors import CadreError

LINES = 300
FOLLOW_MS = 1000


class LogView(QPlainTextEdit):
    def __init__(self, host, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.node_id: str | None = None
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setPlaceholderText("Select a node to see its log.")
        self._text: str | None = ""
        self._timer = QTimer(self)
        self._timer.setInterval(FOLLOW_MS)
        self._timer.timeout.connect(self.reload)

    def follow(self, node_id: str | None) -> None:
        if node_id != self.node_id:
            self.node_id = node_id
            self._text = None
            self.reload()

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        self._timer.start()
        self.reload()

    def hideEvent(self, event) -> None:  # noqa: N802
        super().hideEvent(event)
        self._timer.stop()

    def reload(self) -> None:
        if not self.isVisible():
            return
        if self.node_id is None:
            text = ""
        else:
            try:
                text = "\n".join(self.host.log_tail(self.node_id, LINES)) or "(the log is empty)"
            except CadreError as exc:
                text = exc.message
            except OSError as exc:
                text = f"The log cannot be read: {exc.strerror or exc}"
        if text == self._text:
            return
        bar = self.verticalScrollBar()
        at_end = self._text is None or bar.value() >= bar.maximum() - 2
        self._text = text
        self.setPlainText(text)
        if at_end:
            bar.setValue(bar.maximum())
