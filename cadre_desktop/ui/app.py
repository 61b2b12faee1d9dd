"""The tray application's entry point, and the one place that creates and closes the qasync loop.

Order of things: a QApplication; if this home already has a tray app, ask it to
show its window and exit 0 (no icon ever shows); else one qasync loop, on which
the Host takes the home (its lock: a host already running for it is told at once,
with no icon either), the single-instance channel listens, and the Shell shows
the tray icon, saying "Starting…". Only then does the Host start (read the
records, re-attach to the running nodes, supervise, serve), however many nodes
the home has; its views fill in as it goes and in full once it is up. A start
that fails is shown, then the icon goes. The Shell runs until Quit or
SIGINT/SIGTERM (a Quit while starting waits for the start), and the Host stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

import qasync
from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QMessageBox

from cadre_desktop import APP_NAME
from cadre_desktop.errors import HostBusy
from cadre_desktop.logs.logsetup import prepare_process, setup_logging
from cadre_desktop.paths import Paths, resolve_paths
from cadre_desktop.ui.errors import show_error
from cadre_desktop.ui.single import InstanceServer, hand_off, instance_name
from cadre_desktop.ui.tray.icons import APP_ICON

log = logging.getLogger(__name__)


def _no_display() -> bool:
    return (sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"))


#: The roles whose disabled colour some themes leave equal to the active one.
_DIMMED_ROLES = ((QPalette.ColorRole.ButtonText, QPalette.ColorRole.Button),
                 (QPalette.ColorRole.WindowText, QPalette.ColorRole.Window),
                 (QPalette.ColorRole.Text, QPalette.ColorRole.Base))


def mend_disabled_colours(palette: QPalette) -> bool:
    """Give disabled text a dimmed colour where the theme gave it none (a dark GTK theme
    leaves it equal to the enabled one, so a disabled button looked enabled): halfway
    between the text and its background. True when something changed."""
    changed = False
    for text_role, background_role in _DIMMED_ROLES:
        active = palette.color(QPalette.ColorGroup.Active, text_role)
        if palette.color(QPalette.ColorGroup.Disabled, text_role) != active:
            continue
        back = palette.color(QPalette.ColorGroup.Active, background_role)
        dimmed = QColor((active.red() + back.red()) // 2, (active.green() + back.green()) // 2,
                        (active.blue() + back.blue()) // 2)
        palette.setColor(QPalette.ColorGroup.Disabled, text_role, dimmed)
        changed = True
    return changed


def run_gui(argv: list[str] | None = None) -> int:
    if _no_display():
        print(f"{APP_NAME}: there is no graphical display (DISPLAY is not set). "
              f"`{APP_NAME} --headless` hosts nodes without a window.", file=sys.stderr)
        return 1
    paths = resolve_paths()
    setup_logging(paths)
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication([APP_NAME, *(argv or [])])
    app.setApplicationName(APP_NAME)
    app.setDesktopFileName(APP_NAME)
    app.setQuitOnLastWindowClosed(False)
    app.setWindowIcon(QIcon(str(APP_ICON)))
    palette = app.palette()
    if mend_disabled_colours(palette):
        app.setPalette(palette)
    name = instance_name(paths)
    if hand_off(name):
        log.info("%s already runs for %s; asked it to show its window", APP_NAME, paths.data_dir)
        return 0
    loop = tray_loop(app)
    asyncio.set_event_loop(loop)
    prepare_process(loop)
    try:
        return loop.run_until_complete(_serve(paths, name))
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def tray_loop(app: QApplication) -> qasync.QEventLoop:
    """The tray's event loop, its default executor the standard pool the headless host's loop has:
    a thread started only when work waits for one. qasync's own starts ten QThreads at its first
    use (the start's census) and keeps them for good (bench/README.md, issue 38)."""
    loop = qasync.QEventLoop(app)
    loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="cadre-loop"))
    return loop


async def _serve(paths: Paths, name: str) -> int:
    from cadre_desktop.host.host import Host
    from cadre_desktop.settings import load_settings
    from cadre_desktop.ui.shell import Shell

    quit_now = asyncio.Event()
    _stop_on_signals(quit_now.set)  # before start: a SIGTERM while starting still stops cleanly
    first_run = is_first_run(paths)  # before the host's start writes its files
    try:
        settings = load_settings(paths.settings_file)
        host = Host(paths, settings)
        host.take_home()  # one host per home, known before any icon shows
    except HostBusy as exc:
        if hand_off(name):  # a tray app that started just before us
            return 0
        await _tell(exc, "start: another host runs for this home")
        return 1
    except Exception as exc:  # whatever stops the start is shown (and logged by show_error) before the app exits
        await _tell(exc, "start the host")
        return 1
    server = InstanceServer(name)
    server.listen()  # the home is ours: a later launch shows our window, even while we start
    shell = Shell(host, settings, starting=True)
    server.show_requested.connect(shell.present_window)
    shell.quit_requested.connect(quit_now.set)
    shell.start(first_run=first_run)  # the icon first, saying "Starting…"
    if not await _start_engine(host, shell):
        server.close()
        return 1
    if first_run:
        paths.first_run_marker.unlink(missing_ok=True)  # said once
    log.info("tray app running for %s", paths.data_dir)
    await quit_now.wait()
    log.info("quitting")
    await shell.stop()
    server.close()
    return 0


async def _start_engine(host, shell) -> bool:
    """Start the host under the shown icon; a failure is shown, then the icon goes (the host
    released the home already)."""
    try:
        await host.start()
    except Exception as exc:  # shown, like a failure before the icon
        await _tell(exc, "start the host")
        await shell.actions.cancel_all()
        shell.close()
        return False
    shell.engine_up()
    return True


def is_first_run(paths: Paths) -> bool:
    """No node was ever added in this home (no hosted-nodes.json), or set-up asked for the
    welcome again (the `first_run` marker in the config folder)."""
    return not paths.records_file.exists() or paths.first_run_marker.exists()


async def _tell(error: BaseException, doing: str) -> None:
    """Show a start-up error (there is no window yet) and wait until it is read."""
    box: QMessageBox = show_error(None, error, doing)
    closed = asyncio.get_running_loop().create_future()
    box.finished.connect(lambda *_: None if closed.done() else closed.set_result(None))
    await closed


def _stop_on_signals(stop) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass  # Windows: Quit from the tray
