"""Single instance per home, the no-tray fallback, and Quit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cadre_desktop.paths import resolve_paths
from cadre_desktop.ui.single import InstanceServer, instance_name
from tests.support.headless import fast_settings

REPO = Path(__file__).resolve().parents[2]


def launch(home: Path, extra_env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "CADRE_DESKTOP_HOME": str(home), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": str(REPO), **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-m", "cadre_desktop"], env=env, cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_second_launch_shows_the_first_window_and_exits_0(home, qtbot):
    server = InstanceServer(instance_name(resolve_paths()))
    assert server.listen()
    try:
        with qtbot.waitSignal(server.show_requested, timeout=20000):
            second = launch(home)
            qtbot.waitUntil(lambda: second.poll() is not None, timeout=20000)
        assert second.returncode == 0, second.stdout.read()
        assert "already runs" in second.stdout.read()
        assert not (home / "control.json").exists()  # it never started a host
    finally:
        server.close()


def test_instances_of_different_homes_have_different_names(tmp_path):
    first = instance_name(resolve_paths({"CADRE_DESKTOP_HOME": str(tmp_path / "a")}))
    second = instance_name(resolve_paths({"CADRE_DESKTOP_HOME": str(tmp_path / "b")}))
    assert first != second and first.startswith("cadre-desktop-")


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


def test_quit_stops_the_host_and_its_nodes(shell, aio):
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id).ready)
    shell.notifier.muted = False
    aio.run(shell.stop())
    assert shell.notifier.muted
    assert not psutil.pid_exists(view.pid) or psutil.Process(view.pid).status() == psutil.STATUS_ZOMBIE
    assert not shell.window.isVisible() and not shell.tray.icon.isVisible()


@pytest.mark.parametrize("settings_doc", [fast_settings(keep_nodes_running_on_quit=True)], indirect=True)
def test_quit_can_leave_the_nodes_running(shell, aio):
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id).ready)
    aio.run(shell.stop())
    assert psutil.Process(view.pid).is_running()
    assert shell.stopping_text == "Stopping the host; the nodes keep running."


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
