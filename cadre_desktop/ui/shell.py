"""The views over one started Host, wired together: tray, window, QR dialogs, notifications.

`app.py` creates the loop and the Host and hands the started Host to a Shell;
tests do the same with an in-process Host. The Shell owns the UI's side of
quitting: it mutes notifications, stops the host, and shows progress when that
takes more than a moment.
"""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QProgressDialog, QSystemTrayIcon

from cadre_desktop.settings import Settings
from cadre_desktop.ui import autostart as autostart_module
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.dialogs import AddDialog, JoinDialog, open_dialog
from cadre_desktop.ui.icons import TrayIcons
from cadre_desktop.ui.lent import LentUi
from cadre_desktop.ui.model import NodeTableModel
from cadre_desktop.ui.notify import Notifier
from cadre_desktop.ui.qr import QrDialog
from cadre_desktop.ui.tray import Tray
from cadre_desktop.ui.window import NodeWindow

log = logging.getLogger(__name__)

TRAY_WAIT_S = 20.0
TRAY_POLL_MS = 500
PROGRESS_AFTER_MS = 400
NO_TRAY_TEXT = (
    "<b>No system tray was found</b>, so cadre-desktop shows this window instead of a tray icon. "
    "On GNOME, install and enable the “AppIndicator and KStatusNotifierItem Support” extension "
    "and start cadre-desktop again; other desktops need a panel with a system tray (notification "
    "area). Closing this window quits cadre-desktop."
)


class Shell(QObject):
    #: The person asked to quit (menu, or closing the window when there is no tray).
    quit_requested = Signal()

    def __init__(self, host, settings: Settings, *, autostart=autostart_module,
                 tray_wait_s: float = TRAY_WAIT_S, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.settings = host, settings
        self.bridge = HostBridge(host, self)
        self.model = NodeTableModel(host, self.bridge, self)
        self.actions = Actions(host, lambda: self.window, self)
        self.window = NodeWindow(host, self.model, self.actions)
        self.lent = LentUi(host, self.bridge, self.actions, self.window, self)  # the window's Lent tab
        self.icons = TrayIcons(settings.monochrome_icon)
        self.tray = Tray(self.model, self.icons, autostart, self, lent=self.lent.model)
        self.notifier = Notifier(host, self.bridge, self.actions, self.tray.icon, settings.notifications, self)
        self.qr_dialogs: dict[str, QrDialog] = {}
        self.tray_wait_s = tray_wait_s
        self._tray_deadline = 0.0
        self._tray_timer = QTimer(self)
        self._tray_timer.setInterval(TRAY_POLL_MS)
        self._tray_timer.timeout.connect(self._poll_tray)
        self.stopping = self.stopped = False
        self.stopping_text = ""
        self.progress: QProgressDialog | None = None

        for signal, slot in (
            (self.tray.open_window, self.window.present), (self.tray.open_node, self.window.show_node),
            (self.tray.add_node, self.ask_add), (self.tray.join_node, self.ask_join),
            (self.tray.quit, self.quit_requested), (self.window.add_requested, self.ask_add),
            (self.window.join_requested, self.ask_join), (self.window.qr_requested, self.show_qr),
            (self.window.quit_requested, self.quit_requested), (self.notifier.open_node, self.window.show_node),
            (self.actions.added, self._added), (self.tray.lend_nodes, self.lent.ask_lend),
            (self.tray.open_lent, self.lent.show_lent), (self.notifier.open_lent, self.lent.show_lent),
        ):
            signal.connect(slot)

    # -- start -----------------------------------------------------------------------------

    def start(self) -> None:
        """Show the tray icon, or wait for a tray a while, then fall back to the window."""
        self.tray.show()
        if not QSystemTrayIcon.isSystemTrayAvailable():
            log.info("no system tray yet; waiting up to %.0f s for one", self.tray_wait_s)
            self._tray_deadline = time.monotonic() + self.tray_wait_s
            self._tray_timer.start()

    def _poll_tray(self) -> None:
        if QSystemTrayIcon.isSystemTrayAvailable():
            self._tray_timer.stop()
            self.tray.show()
        elif time.monotonic() >= self._tray_deadline:
            self._tray_timer.stop()
            log.warning("no system tray appeared; showing the window instead")
            self.window.explain_no_tray(NO_TRAY_TEXT)
            self.window.present()

    # -- commands --------------------------------------------------------------------------

    def ask_add(self) -> None:
        open_dialog(AddDialog(self._dialog_parent(), self.actions.add))

    def ask_join(self) -> None:
        open_dialog(JoinDialog(self._dialog_parent(), self.actions.join))

    def _dialog_parent(self):
        return self.window if self.window.isVisible() else None

    def _added(self, node_id: str) -> None:
        v = self.model.view(node_id)
        if self.window.isVisible():
            self.window.select(node_id)
        if v is not None and v.status == "unclaimed":
            self.show_qr(node_id)

    def show_qr(self, node_id: str) -> QrDialog:
        dialog = self.qr_dialogs.get(node_id)
        if dialog is None:
            dialog = QrDialog(node_id, self.model, self.actions, self._dialog_parent())
            self.qr_dialogs[node_id] = dialog
            dialog.destroyed.connect(lambda *_: self.qr_dialogs.pop(node_id, None))
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog

    # -- quit ------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the host (nodes too, unless `keep_nodes_running_on_quit`), then close every view."""
        if self.stopping:
            return
        self.stopping = True
        self.notifier.mute()
        self.tray.menu.hide()
        running = sum(1 for v in self.model.views() if v.running)
        self.stopping_text = (
            "Stopping the host; the nodes keep running." if self.settings.keep_nodes_running_on_quit or not running
            else f"Stopping {running} node{'s' if running != 1 else ''}…")
        QTimer.singleShot(PROGRESS_AFTER_MS, self, self._show_progress)
        try:
            await self.actions.cancel_all()
            await self.host.stop()
        finally:
            self.stopped = True
            if self.progress is not None:
                self.progress.close()
            self.close()

    def _show_progress(self) -> None:
        """Only when stopping takes more than a moment."""
        if self.stopped:
            return
        self.progress = QProgressDialog(self.stopping_text, "", 0, 0, self._dialog_parent())
        self.progress.setWindowTitle("cadre-desktop")
        self.progress.setCancelButton(None)
        self.progress.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.progress.show()

    def close(self) -> None:
        self.bridge.close()
        self.model.stop()
        self.tray.close()
        for dialog in list(self.qr_dialogs.values()):
            dialog.close()
        self.window.closing = True
        self.window.close()
