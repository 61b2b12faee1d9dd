"""The views over one Host, wired together: tray, window, QR dialogs, notifications.

`app.py` creates the loop and the Host and hands it to a Shell before the Host
starts (`starting=True`): the icon shows at once, saying "Starting…", and
`engine_up` fills the views in once the Host has started; meanwhile what needs the
engine waits for it (`Actions`) or is disabled (the tray's Add, Join, Lend), and a
Quit waits for the start, then asks as always. Tests hand it a started in-process
Host, or the app's own start (tests/ui/test_app_start.py). A tray app spends most of its life
with no window open, so the window, the dialogs, Preferences and the QR code
(and the modules behind them) are built and imported only when first shown.

The Shell owns the UI's side of quitting: it mutes notifications, stops the
host, and shows progress when that takes more than a moment. Then `close`
deletes every Qt object the Shell made, at once and on this thread (see
`delete_now`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QDialog, QMessageBox, QProgressDialog, QSystemTrayIcon

from cadre_desktop import autostart as autostart_module
from cadre_desktop.errors import CadreError, SettingsError
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.settings import Settings
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.errors import show_error
from cadre_desktop.ui.fleet.pairing import FleetUi
from cadre_desktop.ui.lending.lent_ui import LentUi
from cadre_desktop.ui.nodes.model import NodeTableModel
from cadre_desktop.ui.settings_store import SettingsWatcher, save_changes
from cadre_desktop.ui.tray.delivery import Delivery
from cadre_desktop.ui.tray.icons import ALERT_ICON, APP_ICON, TrayIcons
from cadre_desktop.ui.tray.notify import Notifier
from cadre_desktop.ui.tray.tray import QUITTING, STARTING, Tray

if TYPE_CHECKING:
    from cadre_desktop.ui.nodes.window import NodeWindow

log = logging.getLogger(__name__)

TRAY_WAIT_S = 20.0
TRAY_POLL_MS = 500
PROGRESS_AFTER_MS = 400
WAITING_TEXT = (
    "<b>Waiting for a system tray…</b> cadre-desktop lives in the tray; until one appears this window "
    "stands in for it, and closing it quits cadre-desktop."
)
NO_TRAY_TEXT = (
    "<b>No system tray was found</b>, so cadre-desktop shows this window instead of a tray icon. "
    "On GNOME, install and enable the “AppIndicator and KStatusNotifierItem Support” extension "
    "and start cadre-desktop again; other desktops need a panel with a system tray (notification "
    "area). Closing this window quits cadre-desktop."
)


def delete_now(obj) -> None:
    """Delete `obj`'s C++ object here and now, on the GUI thread.

    Left to Python, a Qt object that sits in a reference cycle (a lambda slot that
    holds its owner is enough) is deleted by the cyclic garbage collector, which
    runs on whichever thread happens to allocate: the host's keyring and executor
    threads too. Deleted there, its timers and socket notifiers are never taken off
    this thread's event dispatcher, which then reads freed memory: heap corruption
    that aborts or hangs the process later, somewhere unrelated."""
    if obj is not None and shiboken6.isValid(obj):
        shiboken6.delete(obj)


class Shell(QObject):
    #: The person asked to quit (menu, or closing the window when there is no tray).
    quit_requested = Signal()

    def __init__(self, host, settings: Settings, *, autostart=autostart_module,
                 tray_wait_s: float = TRAY_WAIT_S, starting: bool = False, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.settings = host, settings
        #: The host is still starting (`engine_up` ends it); a Quit asked meanwhile waits for it.
        self.starting = starting
        self._quit_when_up = False
        self.bridge = HostBridge(host, self)
        self.model = NodeTableModel(host, self.bridge, self)
        self._window: NodeWindow | None = None
        self.closed = False
        self.actions = Actions(host, lambda: self._window, self, engine_up=not starting)
        self.actions.where = self.model.group_of  # a node of a computer that cannot be reached: refused in words
        self.lent = LentUi(host, self.bridge, self.actions, lambda: self.window, self)  # the window's Lent tab
        self.fleet = FleetUi(host, self.actions, self._dialog_parent, self)  # Add a computer…, Join computers…
        self.icons = TrayIcons(settings.monochrome_icon)
        self.autostart = autostart
        self.tray = Tray(self.model, self.icons, self, lent=self.lent.model, pause_state=host.pause_state)
        if starting:
            self.tray.set_starting(STARTING)
        self.delivery = Delivery(self.tray.icon, APP_ICON, parent=self, alert_icon=ALERT_ICON)
        self.notifier = Notifier(host, self.bridge, self.actions, self.delivery, settings, self)
        self.qr_dialogs: dict = {}
        self.preferences: QDialog | None = None
        self.refusal: QMessageBox | None = None
        self.settings_watcher = SettingsWatcher(host.paths.settings_file, settings, self)
        self.settings_watcher.changed.connect(self.apply_settings)
        self.settings_watcher.refused.connect(self._settings_refused)
        #: How the coming quit treats the nodes (the question's answer, else the setting).
        self.stop_nodes_on_quit: bool | None = None
        self.tray_wait_s = tray_wait_s
        self._tray_deadline = 0.0
        self._tray_timer = QTimer(self)
        self._tray_timer.setInterval(TRAY_POLL_MS)
        self._tray_timer.timeout.connect(self._poll_tray)
        self.stopping = self.stopped = False
        self.stopping_text = ""
        self.progress: QProgressDialog | None = None

        for signal, slot in (
            (self.tray.open_window, self.present_window), (self.tray.open_node, self.show_node),
            (self.tray.retry_node, self.actions.retry), (self.tray.resume_node, self.actions.resume),
            (self.tray.preferences, self.ask_preferences),
            (self.tray.add_node, self.ask_add), (self.tray.join_node, self.ask_join),
            (self.tray.quit, self.ask_quit), (self.notifier.open_node, self.show_node),
            (self.actions.added, self._added), (self.tray.lend_nodes, self.lent.ask_lend),
            (self.tray.open_lent, self.lent.show_lent), (self.tray.add_computer, self.fleet.ask_add_computer),
            (self.tray.join_computers, self.fleet.ask_join_computers),
            (self.model.remote_gave_up, self.notifier.remote_gave_up),
            (self.model.remote_recovered, self.notifier.remote_recovered), (self.notifier.open_lent, self.lent.show_lent),
            (self.tray.pause_all, lambda body: self.actions.pause_all(body, done=lambda _: self.tray.update())),
            (self.tray.resume_all, lambda: self.actions.resume_all(done=lambda _: self.tray.update())),
        ):
            signal.connect(slot)
        self._in_fleet()

    def _in_fleet(self) -> None:
        """Tell the fleet this host has a tray (it tells its own nodes' give-ups; host/fleet/fleet.py:notifies_for)."""
        if getattr(self.host, "fleet", None) is not None:
            self.host.fleet.has_tray = True

    # -- the window, built when first needed ------------------------------------------------

    @property
    def window(self):
        """The node window, built (and its modules imported) the first time anything needs it;
        None once the Shell is closed."""
        if self._window is None and not self.closed:
            from cadre_desktop.ui.nodes.window import NodeWindow

            window = NodeWindow(self.host, self.model, self.actions, self.host.paths.config_dir / "window.json")
            for signal, slot in ((window.add_requested, self.ask_add), (window.join_requested, self.ask_join),
                                 (window.qr_requested, self.show_qr), (window.quit_requested, self.ask_quit)):
                signal.connect(slot)
            self._window = window
            self.lent.attach(window)
            window.set_starting(self.starting)
        return self._window

    def present_window(self) -> None:
        self.window.present_attention()

    def show_node(self, node_id: str) -> None:
        self.window.show_node(node_id)

    def _window_visible(self) -> bool:
        return self._window is not None and self._window.isVisible()

    # -- start -----------------------------------------------------------------------------

    def start(self, first_run: bool = False) -> None:
        """Show the tray icon; with no tray yet, show the window at once and keep looking a while.
        A first start opens the window with a welcome: an icon alone says nothing to a new user."""
        self.tray.show()
        if first_run:
            self.window.show_welcome()
            self.window.present()
        if not QSystemTrayIcon.isSystemTrayAvailable():
            log.info("no system tray yet; waiting up to %.0f s for one", self.tray_wait_s)
            self.window.explain_no_tray(WAITING_TEXT)
            self.window.present_attention()
            self._tray_deadline = time.monotonic() + self.tray_wait_s
            self._tray_timer.start()

    def engine_up(self) -> None:
        """The host has started: the views read it whole, what waited runs, a Quit asked meanwhile is asked now."""
        if not self.starting or self.closed:
            return
        self.starting = False
        self._in_fleet()
        self.actions.engine_up()
        self.model.refresh()
        self.lent.model.refresh()
        self.tray.set_starting(None)
        if self._window is not None:
            self._window.set_starting(False)
        if self._quit_when_up:
            self.ask_quit()

    def _poll_tray(self) -> None:
        if QSystemTrayIcon.isSystemTrayAvailable():
            self._tray_timer.stop()
            self.tray.show()
            self.window.tray_found()
        elif time.monotonic() >= self._tray_deadline:
            self._tray_timer.stop()
            log.warning("no system tray appeared; showing the window instead")
            self.window.explain_no_tray(NO_TRAY_TEXT)
            self.window.present()

    # -- commands --------------------------------------------------------------------------

    def ask_add(self) -> None:
        from cadre_desktop.ui.prefs.dialogs import AddDialog, open_dialog

        open_dialog(AddDialog(self._dialog_parent(), self.actions.add))

    def ask_join(self) -> None:
        from cadre_desktop.ui.prefs.dialogs import JoinDialog, open_dialog

        open_dialog(JoinDialog(self._dialog_parent(), self.actions.join))

    def ask_preferences(self):
        if self.preferences is None:
            from cadre_desktop.ui.prefs.dialogs import open_dialog
            from cadre_desktop.ui.prefs.preferences import PreferencesDialog

            dialog = PreferencesDialog(self.settings, self.host.paths.settings_file, self.autostart,
                                       self.host.advertise_host, self._dialog_parent())
            dialog.saved.connect(self.apply_settings)
            dialog.destroyed.connect(lambda *_: setattr(self, "preferences", None))
            self.preferences = open_dialog(dialog)
        self.preferences.show()
        self.preferences.raise_()
        self.preferences.activateWindow()
        return self.preferences

    def apply_settings(self, settings: Settings) -> None:
        """New settings (Preferences, or settings.json edited by hand): the UI at once, the host live."""
        if settings == self.settings:
            return
        self.settings = settings
        self.settings_watcher.accept(settings)
        self.notifier.apply(settings)
        self.actions.run("apply the new settings", self.host.apply_settings(settings))

    def _settings_refused(self, message: str) -> None:
        # Kept: a box with no parent window would be deleted with its Python wrapper.
        self.refusal = show_error(self._dialog_parent(), SettingsError(message + " The settings in use stay as they were."),
                   "use the edited settings.json")

    def _dialog_parent(self):
        return self._window if self._window_visible() else None

    def _added(self, node_id: str) -> None:
        v = self.model.view(node_id)
        if self._window is not None and self._window_visible():
            self._window.select(node_id)
        if v is not None and v.status == NodeStatus.UNCLAIMED:
            self.show_qr(node_id)

    def show_qr(self, node_id: str):
        dialog = self.qr_dialogs.get(node_id)
        if dialog is None:
            from cadre_desktop.ui.nodes.qr import QrDialog

            dialog = QrDialog(node_id, self.model, self.actions, self._dialog_parent())
            self.qr_dialogs[node_id] = dialog
            dialog.destroyed.connect(lambda *_: self.qr_dialogs.pop(node_id, None))
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog

    # -- quit ------------------------------------------------------------------------------

    def ask_quit(self) -> None:
        """Quit; first ask whether to stop the nodes, unless the person said not to ask again.
        While the host starts, once it has started (which nodes run is known only then)."""
        if self.starting:
            self._quit_when_up = True
            self.tray.set_starting(QUITTING)
            return
        running = sum(1 for v in self.model.local_views() if v.running)
        if not running or not self.settings.ask_on_quit:
            self.quit_requested.emit()
            return
        from cadre_desktop.ui.prefs.dialogs import ask_how_to_quit

        ask_how_to_quit(self._dialog_parent(), running, self.settings.keep_nodes_running_on_quit, self._answered)

    def _answered(self, keep_running: bool, ask_again: bool) -> None:
        """The answer holds for this quit; it becomes the preference only with *Don't ask again*."""
        self.stop_nodes_on_quit = not keep_running
        changes = {} if ask_again else {"keep_nodes_running_on_quit": keep_running, "ask_on_quit": False}
        if any(getattr(self.settings, k) != v for k, v in changes.items()):
            try:
                self.apply_settings(save_changes(self.host.paths.settings_file, changes))
            except CadreError as exc:  # quitting goes on; the answer holds for this time
                log.warning("cannot remember the answer to quitting: %s", exc.message)
        self.quit_requested.emit()

    async def stop(self) -> None:
        """Stop the host (nodes too, unless `keep_nodes_running_on_quit`), then close every view."""
        if self.stopping:
            return
        self.stopping = True
        self.notifier.mute()
        self.tray.menu.hide()
        running = sum(1 for v in self.model.local_views() if v.running)
        stop_nodes = self.stop_nodes_on_quit
        if stop_nodes is None:
            stop_nodes = not self.settings.keep_nodes_running_on_quit
        self.stopping_text = (
            f"Stopping {running} node{'s' if running != 1 else ''}…" if stop_nodes and running
            else "Stopping the host; the nodes keep running.")
        QTimer.singleShot(PROGRESS_AFTER_MS, self, self._show_progress)
        try:
            await self.actions.cancel_all()
            await self.notifier.close()
            await self.host.stop(stop_nodes=stop_nodes)
        finally:
            self.stopped = True
            if self.progress is not None:
                self.progress.close()
            self.close()

    def _show_progress(self) -> None:
        """Only when stopping takes more than a moment."""
        if self.stopped:
            return
        from PySide6.QtWidgets import QProgressDialog

        self.progress = QProgressDialog(self.stopping_text, "", 0, 0, self._dialog_parent())
        self.progress.setWindowTitle("cadre-desktop")
        self.progress.setCancelButton(None)
        self.progress.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.progress.show()

    def close(self) -> None:
        """Close every view, then delete every Qt object the Shell made, here and now: a Shell
        left to the garbage collector would be deleted on whatever thread collects it."""
        if self.closed:
            return
        self.closed = True
        self.actions.close()
        self.notifier.stop()
        self.delivery.close()
        self.bridge.close()
        self.model.stop()
        self.tray.close()
        dialogs = [*self.qr_dialogs.values(), self.preferences]
        for dialog in dialogs:
            if dialog is not None:
                dialog.close()
        window, self._window = self._window, None
        if window is not None:
            window.closing = True
            window.close()
        for obj in (*dialogs, self.progress, window, self.tray.menu, self):
            delete_now(obj)
