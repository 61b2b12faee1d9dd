"""Single instance per home, the no-tray fallback, and Quit."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import shiboken6

from cadre_desktop.paths import resolve_paths
from cadre_desktop.ui import single
from cadre_desktop.ui.single import InstanceServer, instance_name
from tests.support.headless import fast_settings

REPO = Path(__file__).resolve().parents[2]


def launch(home: Path, extra_env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "CADRE_DESKTOP_HOME": str(home), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": str(REPO), **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-m", "cadre_desktop"], env=env, cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_second_launch_shows_the_first_window_and_exits_0(home, qtbot, aio):
    server = InstanceServer(instance_name(resolve_paths()))
    assert server.listen()
    try:
        with qtbot.waitSignal(server.show_requested, timeout=20000):
            second = launch(home)
            qtbot.waitUntil(lambda: second.poll() is not None, timeout=20000)
        assert second.stdout is not None
        assert second.returncode == 0, second.stdout.read()
        assert "already runs" in second.stdout.read()
        assert not (home / "control.json").exists()  # it never started a host
    finally:
        server.close()


def second_launch_hands_off(name: str, use_qt: bool, timeout_ms: int = 2000) -> bool:
    """`hand_off` from another process, as a second launch calls it."""
    code = ("import sys; from cadre_desktop.ui import single; "
            f"single.USE_QT = {use_qt}; sys.exit(0 if single.hand_off({name!r}, {timeout_ms}) else 3)")
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=60).returncode == 0


@pytest.mark.parametrize("use_qt", [False, True], ids=["unix-socket", "qt-local-server"])
def test_each_platforms_single_instance_channel_hands_off_once_and_cleans_up(home, aio, monkeypatch, use_qt):
    """Linux and macOS: a Unix socket on the event loop; Windows: QLocalServer (run here on Linux)."""
    monkeypatch.setattr(single, "USE_QT", use_qt)
    name = instance_name(resolve_paths())
    assert not aio.run(asyncio.to_thread(second_launch_hands_off, name, use_qt, 300))  # nobody listens yet
    if not use_qt:  # a crashed instance's socket is in the way, and is replaced
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(single.socket_path(name))
    server = InstanceServer(name)
    shown = []
    server.show_requested.connect(lambda: shown.append(True))
    assert server.listen()
    try:
        if not use_qt:
            assert stat.S_IMODE(os.stat(single.socket_path(name)).st_mode) == 0o600
        assert aio.run(asyncio.to_thread(second_launch_hands_off, name, use_qt))
        aio.wait(lambda: shown == [True])
    finally:
        server.close()
    assert not aio.run(asyncio.to_thread(second_launch_hands_off, name, use_qt, 300))
    assert not os.path.exists(single.socket_path(name))


def test_instances_of_different_homes_have_different_names(tmp_path):
    first = instance_name(resolve_paths({"CADRE_DESKTOP_HOME": str(tmp_path / "a")}))
    second = instance_name(resolve_paths({"CADRE_DESKTOP_HOME": str(tmp_path / "b")}))
    assert first != second and first.startswith("cadre-desktop-")


@pytest.mark.slow
def test_without_a_tray_the_window_opens_and_explains(shell, qtbot, monkeypatch):
    from PySide6.QtWidgets import QSystemTrayIcon

    assert not QSystemTrayIcon.isSystemTrayAvailable()  # offscreen has none
    shell.tray_wait_s = 1.0
    shell.start()
    assert shell.window.isVisible()  # at once, saying what it waits for
    assert shell.window.banner.isVisible() and "Waiting for a system tray" in shell.window.banner.text()
    assert shell.window.quit_on_close  # nothing may go on invisibly meanwhile
    qtbot.waitUntil(lambda: "No system tray was found" in shell.window.banner.text(), timeout=5000)
    assert "AppIndicator" in shell.window.banner.text()
    with qtbot.waitSignal(shell.quit_requested, timeout=1000):
        shell.window.close()  # with no tray, closing the window quits


def test_with_a_tray_no_window_is_built_until_it_is_opened(shell, qtbot, monkeypatch):
    from cadre_desktop.ui import shell as shell_module

    monkeypatch.setattr(shell_module.QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    shell.start()
    assert shell._window is None, "the tray built its window before anyone opened it"
    shell.tray.open_window.emit()
    assert shell._window is not None and shell.window.isVisible()
    assert shell.window is shell._window  # built once
    assert shell.lent.tabs.indexOf(shell.lent.view) == 1  # the Lent tab went in with it
    with qtbot.waitSignal(shell.quit_requested, timeout=1000):
        shell.window.quit_requested.emit()  # the late-built window is wired like the rest


def test_the_tray_app_imports_no_window_dialog_or_qr_code_and_no_other_qt_module_until_shown():
    lazy = ("cadre_desktop.ui.nodes.window", "cadre_desktop.ui.prefs.dialogs", "cadre_desktop.ui.nodes.qr",
            "cadre_desktop.ui.prefs.preferences", "cadre_desktop.ui.nodes.table", "cadre_desktop.ui.nodes.details",
            "cadre_desktop.ui.lending.lent", "cadre_desktop.ui.lending.grant_dialog", "cadre_desktop.ui.nodes.logview",
            "cadre_desktop.claim_qr", "segno")
    code = ("import sys, cadre_desktop.ui.app, cadre_desktop.ui.shell, cadre_desktop.host.host; "
            f"print(sorted(m for m in {lazy!r} if m in sys.modules)); "
            "print(sorted(m for m in sys.modules if m.startswith('PySide6.Qt')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO), "QT_QPA_PLATFORM": "offscreen"})
    assert out.returncode == 0, out.stderr
    imported, qt = out.stdout.splitlines()
    assert imported == "[]", f"imported at start: {imported}"
    assert qt == "['PySide6.QtCore', 'PySide6.QtGui', 'PySide6.QtWidgets']"  # no QtNetwork, QtSvg, ...


def test_closing_the_shell_deletes_every_qt_object_it_made_on_this_thread(shell, qtbot):
    """Python's cyclic collector runs on whichever thread allocates (the host's keyring and
    executor threads too), and a Shell is full of cycles. A live Qt object it deleted there would
    leave its timers and socket notifiers registered with this thread's event dispatcher, in
    freed memory. So close() deletes them all itself: the collector finds only empty wrappers."""
    from PySide6.QtCore import QObject
    from PySide6.QtWidgets import QApplication

    before = set(QApplication.topLevelWidgets())
    shell.present_window()
    shell.ask_preferences()
    made = [shell, *shell.findChildren(QObject)]
    for widget in (set(QApplication.topLevelWidgets()) - before) | {shell.tray.menu}:
        made += [widget, *widget.findChildren(QObject)]
    assert shell.window in made and shell.tray.menu in made and shell.preferences in made
    shell.close()
    assert [o for o in made if shiboken6.isValid(o)] == []
    assert shell.window is None  # and no window is built after the close


def test_quit_stops_the_host_and_its_nodes(shell, aio):
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id).ready)
    shell.notifier.muted = False
    aio.run(shell.stop())
    assert shell.notifier.muted
    assert not psutil.pid_exists(view.pid) or psutil.Process(view.pid).status() == psutil.STATUS_ZOMBIE
    assert shell.window is None and not shiboken6.isValid(shell.tray.icon)  # every view is gone


@pytest.mark.parametrize("settings_doc", [fast_settings(keep_nodes_running_on_quit=True)], indirect=True)
def test_quit_can_leave_the_nodes_running(shell, aio):
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id).ready)
    aio.run(shell.stop())
    assert psutil.Process(view.pid).is_running()
    assert shell.stopping_text == "Stopping the host; the nodes keep running."


@pytest.mark.slow
def test_quit_shows_progress_when_stopping_takes_a_while(shell, aio, qtbot, monkeypatch):
    import asyncio

    from cadre_desktop.ui import shell as shell_module

    monkeypatch.setattr(shell_module, "PROGRESS_AFTER_MS", 50)
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id).ready)
    real_stop = shell.host.stop
    seen = []

    async def slow_stop(*args, **kwargs):
        await asyncio.sleep(0.5)
        seen.append(shell.progress.isVisible() and shell.progress.labelText())
        await real_stop(*args, **kwargs)
    monkeypatch.setattr(shell.host, "stop", slow_stop)
    aio.run(shell.stop())
    assert seen == ["Stopping 1 node…"]


@pytest.mark.parametrize("settings_doc", [fast_settings(keep_nodes_running_on_quit=True, warm_standby=True)],
                         indirect=True)
def test_a_node_kept_running_and_re_attached_keeps_its_uptime(shell, aio):
    """Uptime counts from the node's own start (its handle's), not from the host that re-attached it."""
    import keyring.backends.SecretService

    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.host.host import Host
    from cadre_desktop.settings import load_settings

    view = aio.run(shell.host.add_node("Kitchen"))
    before = aio.wait(lambda: (v := shell.model.view(view.id)) and v.ready and v)
    aio.run(shell.stop())
    again = Host(shell.host.paths, load_settings(shell.host.paths.settings_file),
                 secrets=SecretStore(keyring.backends.SecretService.Keyring()), serve_control_api=False)
    aio.run(again.start())
    try:
        after = aio.wait(lambda: (v := again.get_node(view.id)).running and v)
        assert after.pid == before.pid and after.started_at == before.started_at
    finally:
        aio.run(again.stop(stop_nodes=True))


def test_a_first_start_opens_the_window_with_a_welcome(shell, qtbot, monkeypatch):
    """Regression: the first start showed only a small grey icon; nothing said where to look."""
    from cadre_desktop.ui import shell as shell_module

    monkeypatch.setattr(shell_module.QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    shell.start(first_run=True)
    window = shell.window
    qtbot.waitExposed(window)
    words = window.welcome.text()
    assert window.welcome.isVisible() and "A <i>node</i> is" in words and "<b>Add node</b>" in words
    assert "tray" in words and "its icon is" in words
    window.welcome_button.click()
    assert not window.welcome.isVisible()


def test_later_starts_open_no_window(shell, monkeypatch):
    from cadre_desktop.ui import shell as shell_module

    monkeypatch.setattr(shell_module.QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    shell.start(first_run=False)
    assert shell._window is None


@pytest.mark.parametrize(("platform", "words"), [("darwin", "menu bar"), ("win32", "^ arrow"),
                                                 ("linux", "system tray")])
def test_the_welcome_says_where_the_tray_icon_is_on_each_platform(platform, words):
    from cadre_desktop.ui.nodes.window import welcome_text

    assert words in welcome_text(platform)


def test_first_run_is_a_home_without_records_or_with_the_marker(tmp_path):
    from cadre_desktop.paths import Paths
    from cadre_desktop.ui.app import is_first_run

    paths = Paths(data_dir=tmp_path / "data", config_dir=tmp_path / "cfg", log_dir=tmp_path / "logs")
    assert is_first_run(paths)
    paths.records_file.parent.mkdir(parents=True)
    paths.records_file.write_text("{}")
    assert not is_first_run(paths)
    paths.first_run_marker.parent.mkdir(parents=True)
    paths.first_run_marker.touch()
    assert is_first_run(paths)


def test_disabled_text_is_dimmed_where_a_dark_theme_left_it_as_enabled(qapp):
    """Regression: under a dark GTK theme disabled buttons looked enabled (the theme gave the
    disabled colour group the enabled text colour)."""
    from PySide6.QtGui import QColor, QPalette

    from cadre_desktop.ui.app import mend_disabled_colours

    dark = QPalette()
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive, QPalette.ColorGroup.Disabled):
        dark.setColor(group, QPalette.ColorRole.ButtonText, QColor("#eeeeee"))
        dark.setColor(group, QPalette.ColorRole.Button, QColor("#2b2b2b"))
    assert mend_disabled_colours(dark)
    disabled = dark.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText)
    assert disabled != QColor("#eeeeee") and 0x70 < disabled.lightness() < 0xc0
    assert dark.color(QPalette.ColorGroup.Active, QPalette.ColorRole.ButtonText) == QColor("#eeeeee")
    assert not mend_disabled_colours(dark)  # a theme that dims them is left alone


def test_the_tray_loop_starts_no_thread_until_work_is_handed_to_it_and_then_one(qapp):
    """Issue 38: qasync's own default executor started ten QThreads at its first use and kept them."""
    import threading

    from cadre_desktop.ui.app import tray_loop

    me = psutil.Process()
    loop = tray_loop(qapp)
    try:
        before = me.num_threads()  # the OS's count: QThreads are no Python threads until they run Python
        names = [loop.run_until_complete(asyncio.to_thread(lambda: threading.current_thread().name))
                 for _ in range(3)]
        assert names[0].startswith("cadre-loop"), names
        assert me.num_threads() - before == 1  # one thread, reused: work one at a time needs no more
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def test_the_tray_app_loads_no_module_that_only_a_rare_path_needs():
    """Issue 38: each of these was loaded at every start for one rare use: plistlib (and the XML parser
    it brings) for a Mac's launch agent, difflib for a wrong setting's message, zoneinfo for a run
    schedule, uuid (and platform) for a handle's id."""
    rare = ("plistlib", "xml.parsers.expat", "difflib", "zoneinfo", "uuid")
    code = ("import sys, cadre_desktop.ui.app, cadre_desktop.ui.shell, cadre_desktop.host.host; "
            f"print(sorted(m for m in {rare!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO), "QT_QPA_PLATFORM": "offscreen"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"imported at start: {out.stdout.strip()}"
