"""The tray app's start: the icon first, the engine after (issue 26).

`ui/app.py:_serve` runs here as the app runs it, on the test's qasync loop, with a real
Host held at the start of its `start` (tests/support/gated_host.py) until the test lets
it go: the icon shows while the host is held, the menu fills in once it is up, a start
that fails is shown and the icon goes, and a Quit while starting stops the host once,
after its start, leaving nothing running.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import shiboken6
from PySide6.QtWidgets import QApplication, QMessageBox

from cadre_desktop.host.host import Host  # the real one: the app's is replaced by a gated one below
from cadre_desktop.paths import resolve_paths
from cadre_desktop.ui.single import instance_name
from tests.support.gated_host import GatedHosts
from tests.support.headless import fast_settings
from tests.support.node_scan import kill_node_processes

REPO = Path(__file__).resolve().parents[2]
NO_QUESTION = fast_settings(ask_on_quit=False)


@pytest.fixture
def app_run(home, keyring_env, aio, monkeypatch):
    """`_serve` started as a task, its hosts gated and its Shells kept: (task, hosts, shells)."""
    from cadre_desktop.host import host as host_module
    from cadre_desktop.ui import app
    from cadre_desktop.ui import shell as shell_module

    hosts, shells = GatedHosts(), []
    real_shell = shell_module.Shell

    def make_shell(*args, **kwargs):
        shells.append(real_shell(*args, **kwargs))
        return shells[-1]
    monkeypatch.setattr(host_module, "Host", hosts)
    monkeypatch.setattr(shell_module, "Shell", make_shell)
    paths = resolve_paths()
    state: dict = {}

    def start(held: bool = True):
        state["task"] = asyncio.ensure_future(app._serve(paths, instance_name(paths)))
        if not held:
            return state["task"], None, shells
        aio.wait(lambda: hosts.made and hosts.made[0].waiting)
        return state["task"], hosts.made[0], shells[0]
    yield start
    for host in hosts.made:
        host.release.set()
    task = state.get("task")
    if task is not None and not task.done():
        for shell in shells:
            shell.quit_requested.emit()
        aio.wait(task.done, timeout=30)
    kill_node_processes(home)  # a quit that leaves the nodes running leaves them to the next test otherwise


def node_running_in(home, aio, keyring_env) -> int:
    """A node added by a host that then quits and leaves it running: its pid."""
    import keyring.backends.SecretService

    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.settings import load_settings

    paths = resolve_paths()
    host = Host(paths, load_settings(paths.settings_file),
                secrets=SecretStore(keyring.backends.SecretService.Keyring()), serve_control_api=False)
    aio.run(host.start())
    view = aio.run(host.add_node("Kitchen"))
    aio.wait(lambda: host.get_node(view.id).ready)
    pid = host.get_node(view.id).pid
    aio.run(host.stop(stop_nodes=False))
    assert pid is not None
    return pid


def hands_off(name: str) -> bool:
    code = f"import sys; from cadre_desktop.ui import single; sys.exit(0 if single.hand_off({name!r}) else 3)"
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=60).returncode == 0


def error_boxes() -> list[QMessageBox]:
    return [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]


@pytest.mark.parametrize("settings_doc", [NO_QUESTION], indirect=True)
def test_the_icon_shows_while_the_host_starts_and_the_menu_fills_in_once_it_is_up(
        app_run, home, aio, keyring_env, monkeypatch):
    from cadre_desktop.ui import shell as shell_module
    from cadre_desktop.ui.tray.tray import STARTING, STARTING_TIP

    monkeypatch.setattr(shell_module.QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    kept = node_running_in(home, aio, keyring_env)
    task, host, shell = app_run()
    tray = shell.tray
    # Held in its start: the icon is up, and says so.
    assert host.waiting and not host.started
    assert tray.icon.isVisible()
    assert tray.summary.text() == STARTING and tray.icon.toolTip() == STARTING_TIP
    assert len(tray.engine_actions) >= 4 and not any(a.isEnabled() for a in tray.engine_actions)
    # What runs before the engine is up is safe: the window (with its Lent tab), the hand-off
    # of a second launch, an Add (which waits for the engine rather than failing).
    tray.open_window.emit()
    assert shell.window.isVisible() and shell.window.empty_page.text().startswith("<h2>Starting")
    assert shell.lent.tabs.indexOf(shell.lent.view) == 1
    assert aio.run(asyncio.to_thread(hands_off, instance_name(host.paths)))
    added = shell.actions.add("Porch")
    assert not added.done() and error_boxes() == []
    host.release.set()
    aio.wait(lambda: host.started)
    aio.wait(added.done)
    assert added.exception() is None
    # Up: the node it re-attached to and the one added meanwhile, Add and Join back.
    aio.wait(lambda: tray.summary.text().startswith("2 nodes"))
    kitchen = next(v for v in shell.model.views() if v.name == "Kitchen")
    assert kitchen.pid == kept  # re-attached, not restarted
    assert all(a.isEnabled() for a in tray.engine_actions)
    assert tray.icon.toolTip() != STARTING_TIP
    assert not shell.window.empty_page.text().startswith("<h2>Starting")
    tray.quit.emit()
    aio.wait(task.done, timeout=30)
    assert task.result() == 0 and host.stops == 1 and not host.started


def test_a_start_that_fails_is_shown_and_then_the_icon_goes(app_run, home, aio, monkeypatch):
    from cadre_desktop.ui import shell as shell_module

    monkeypatch.setattr(shell_module.QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    task, host, shell = app_run()
    assert shell.tray.icon.isVisible()
    waiting = shell.actions.add("Porch")  # asked meanwhile: it waits, and goes with the start
    host.paths.records_file.write_text("{ this is not json")  # broken while the host was held
    host.release.set()
    box = aio.wait(lambda: (boxes := error_boxes()) and boxes[0])
    assert len(error_boxes()) == 1  # the start's error alone
    assert "start the host" in box.text().lower() or "hosted-nodes.json" in (box.text() + box.informativeText())
    assert not task.done() and shell.tray.icon.isVisible()  # shown first, the icon still there
    box.close()
    aio.wait(task.done)
    assert task.result() == 1
    assert shell.closed and not shiboken6.isValid(shell.tray.icon)  # then the icon is gone
    assert waiting.cancelled()
    assert host.stops == 0 and not host.started
    host.take_home()  # the failed start let the home go
    host._lock.release()


@pytest.mark.parametrize("settings_doc", [NO_QUESTION], indirect=True)
def test_quit_while_starting_waits_for_the_start_then_stops_the_host_once(app_run, home, aio, keyring_env):
    from cadre_desktop.ui.tray.tray import QUITTING

    kept = node_running_in(home, aio, keyring_env)
    task, host, shell = app_run()
    # No tray (offscreen has none): the window stands in for it at once, saying it starts.
    assert shell.window.isVisible() and "Waiting for a system tray" in shell.window.banner.text()
    assert shell.window.empty_page.text().startswith("<h2>Starting")
    shell.tray.quit.emit()
    assert shell.tray.summary.text() == QUITTING
    assert not task.done() and not shell.stopping  # it waits for the start
    host.release.set()
    aio.wait(task.done, timeout=30)
    assert task.result() == 0
    assert host.stops == 1 and not host.started
    assert not psutil.pid_exists(kept) or psutil.Process(kept).status() == psutil.STATUS_ZOMBIE
    assert shell.closed and not shiboken6.isValid(shell.tray.icon)


def test_a_home_another_host_runs_is_told_with_no_icon(app_run, home, aio):
    """A headless host (here: the lock taken in this process) has the home: the error, and no
    Shell, so no icon, ever."""
    from cadre_desktop.settings import load_settings

    paths = resolve_paths()
    other = Host(paths, load_settings(paths.settings_file), serve_control_api=False)
    other.take_home()
    try:
        task, _, shells = app_run(held=False)
        box = aio.wait(lambda: (boxes := error_boxes()) and boxes[0])
        assert "already running" in box.text() + box.informativeText()
        assert shells == []
        box.close()
        aio.wait(task.done)
        assert task.result() == 1 and shells == []
    finally:
        other._lock.release()


def test_what_the_ui_reads_of_a_host_before_its_start_is_safe(home, keyring_env):
    from cadre_desktop.errors import Bug, HostBusy, NoSuchThing
    from cadre_desktop.settings import load_settings

    paths = resolve_paths()
    host = Host(paths, load_settings(paths.settings_file), serve_control_api=False)
    host.take_home()
    try:
        assert not host.started and host.list_nodes() == []
        assert host.lending is None and host.driver is None and host.views is None and host.history is None
        assert isinstance(host.advertise_host, str) and host.advertise_host
        with pytest.raises(NoSuchThing):
            host.get_node("n-1")
        with pytest.raises(Bug):
            asyncio.run(host.add_node("too soon"))
        with pytest.raises(HostBusy):  # taken: one host per home from here on
            Host(paths, load_settings(paths.settings_file)).take_home()
        host.take_home()  # taking it again is nothing
    finally:
        asyncio.run(host.stop())  # a host that took the home but never started lets it go
    second = Host(paths, load_settings(paths.settings_file))
    second.take_home()
    second._lock.release()
