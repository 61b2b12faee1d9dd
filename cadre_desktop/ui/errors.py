"""The one way the UI shows an error: a non-modal message box in words a person can act on.

A `CadreError` already carries such words. Anything else, and a `Bug` (a rule of
our own broken), is a bug: it is logged with its traceback and shown as such,
pointing at the host log. Non-modal on
purpose: a nested Qt event loop inside a qasync callback would re-enter asyncio.
"""

from __future__ import annotations

import logging
from typing import TypeGuard

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from cadre_desktop.errors import Bug, CadreError

log = logging.getLogger(__name__)


def _for_a_person(error: BaseException) -> TypeGuard[CadreError]:
    return isinstance(error, CadreError) and not isinstance(error, Bug)


def error_text(error: BaseException) -> str:
    if _for_a_person(error):
        return error.message
    return (f"Something unexpected went wrong ({type(error).__name__}: {error}). "
            "The host log (`cadre-desktop paths` shows where) has the details.")


#: Boxes shown with no parent window (the tray app builds its window only when first opened):
#: Python owns them and would delete each with its last reference, so each is held here until
#: it is closed; Qt then deletes it (WA_DeleteOnClose) on the GUI thread.
_parentless: set[QMessageBox] = set()


def show_error(parent: QWidget | None, error: BaseException, doing: str | None = None) -> QMessageBox:
    """Show `error`; `doing` completes "Could not …" (e.g. "remove Kitchen")."""
    if _for_a_person(error):
        log.warning("could not %s: %s", doing or "do that", error.message)
    else:
        log.error("could not %s", doing or "do that", exc_info=error)
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("cadre-desktop")
    box.setText(f"Could not {doing}." if doing else "Something went wrong.")
    box.setInformativeText(error_text(error))
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    if parent is None:
        _parentless.add(box)
        box.finished.connect(lambda *_: _parentless.discard(box))
    box.open()
    return box
