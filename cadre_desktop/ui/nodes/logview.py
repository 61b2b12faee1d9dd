"""A node's log, its last lines, following what is appended while it is shown.

Another computer's node (the fleet's): its lines are asked of that computer over the fleet link
(`Fleet.log_tail`, never twice at once), read-only, asked again every `FOLLOW_MS` while shown;
a computer that cannot be reached is said so in the pane, and asked again at the next tick.
"""

from __future__ import annotations

import asyncio

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
        self._asking: asyncio.Future | None = None

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
        elif self._is_remote(self.node_id):
            self._ask_remote(self.node_id)
            return
        else:
            try:
                text = "\n".join(self.host.log_tail(self.node_id, LINES)) or "(the log is empty)"
            except CadreError as exc:
                text = exc.message
            except OSError as exc:
                text = f"The log cannot be read: {exc.strerror or exc}"
        self._show(text)

    def _is_remote(self, node_id: str) -> bool:
        fleet = getattr(self.host, "fleet", None)
        return fleet is not None and bool(fleet.doc.computers) and fleet.is_remote(node_id)

    def _ask_remote(self, node_id: str) -> None:
        if self._asking is not None and not self._asking.done():
            return
        if self._text is None:
            self._show("Asking the computer that runs this node for its log…")
        self._asking = asyncio.ensure_future(self.host.fleet.log_tail(node_id, LINES))
        self._asking.add_done_callback(lambda task: self._remote_came(node_id, task))

    def _remote_came(self, node_id: str, task: asyncio.Future) -> None:
        if task.cancelled() or node_id != self.node_id or not self.isVisible():
            return
        exc = task.exception()
        if exc is None:
            text = "\n".join(task.result()) or "(the log is empty)"
        elif getattr(exc, "code", None) == "computer_unreachable":
            text = (f"The log cannot be shown now: {exc.message.split(';')[0]}. "  # type: ignore[attr-defined]
                    "It is asked again while this pane is shown.")
        elif isinstance(exc, CadreError):
            text = exc.message
        else:
            text = f"The log cannot be shown: {type(exc).__name__}"
        self._show(text)

    def _show(self, text: str) -> None:
        if text == self._text:
            return
        bar = self.verticalScrollBar()
        at_end = self._text is None or bar.value() >= bar.maximum() - 2
        self._text = text
        self.setPlainText(text)
        if at_end:
            bar.setValue(bar.maximum())
