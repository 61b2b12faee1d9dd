"""Give-up notifications reach the desktop's notification service under either kind of tray.

A real `dunst` owns org.freedesktop.Notifications on the session bus; `dbus-monitor`
records what the app sends it. Under `trayer` (XEmbed) and under
`gtk-sni-tray-standalone` (StatusNotifierItem) alike: the give-up arrives through
the service, critical, with Retry and the node's own stderr line; a Retry from
elsewhere withdraws it; Retry picked in dunst's own menu restarts the node; and
dunst's default action opens the window on the node; a Retry picked there closes the
notice once its node is back.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from cadre_desktop.ui.tray.icons import ALERT_ICON
from tests.support.e2e.bus import Dunst, Monitor, registered_items
from tests.support.e2e.desktop import running_app, start_desktop
from tests.support.headless import control_request, fast_settings
from tests.support.polling import wait_until

pytestmark = pytest.mark.e2e
STDERR_LINE = "cannot open /dev/ttyUSB0"
BROKEN_NODE = [sys.executable, "-c", f"import sys; sys.stderr.write('{STDERR_LINE}\\n'); sys.exit(3)"]


def until(predicate, what: str, timeout: float = 30):
    return wait_until(predicate, timeout=timeout, interval=0.1, what=what)


@pytest.fixture(params=["trayer", "sni"])
def desktop(request, tmp_path, secret_service):
    desktop = start_desktop(tmp_path, secret_service, tray=request.param)
    yield desktop
    desktop.stop()


def starts(home: Path, node_id: str) -> int:
    path = home / "logs" / f"node-{node_id}.log"
    return path.read_text(errors="replace").count("--- cadre-desktop: starting node") if path.exists() else 0


def give_ups(monitor: Monitor) -> list[str]:
    return [c for c in monitor.calls("Notify") if 'string "Garage stopped"' in c]


def test_give_up_reaches_the_service_with_retry_and_its_default_action_opens_the_window(
        desktop, dunst, monitor, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(fast_settings(node_command=BROKEN_NODE, sweep_ms=250)))
    log_path = tmp_path / "app.log"
    address = desktop.bus_env["DBUS_SESSION_BUS_ADDRESS"]
    with running_app(desktop, home, log_path):
        until(lambda: (home / "control.json").exists(), "the control API")
        if desktop.tray == "sni":
            until(lambda: registered_items(address), "the item registered with the SNI watcher")
        else:
            until(lambda: desktop.tray_box().width >= 16, "the icon in trayer")
        status, body = control_request(home, "POST", "/api/nodes", {"name": "Garage"})
        assert status in (200, 201), body
        node_id = body["id"]

        # The give-up, through org.freedesktop.Notifications: critical, Retry, the stderr line.
        first = until(lambda: give_ups(monitor), "the give-up notification")[0]
        assert re.search(rf'string "exited with code 3: {STDERR_LINE}"', first), first
        assert 'string "retry"' in first and 'string "Retry"' in first and 'string "default"' in first
        assert 'string "urgency"' in first and "byte 2" in first
        assert f'string "{ALERT_ICON.as_uri()}"' in first  # the red warning sign, not the app's icon
        until(lambda: dunst.displayed() == 1, "dunst showing it")

        # Retried from elsewhere (the CLI, the window): the notice is withdrawn.
        assert control_request(home, "POST", f"/api/nodes/{node_id}/retry")[0] == 200
        until(lambda: monitor.calls("CloseNotification"), "the notice withdrawn")
        second = until(lambda: len(give_ups(monitor)) >= 2, "the next give-up")
        assert second

        # Retry picked in dunst's own menu: the node starts again, and gives up again.
        before = starts(home, node_id)
        dunst.ctl("context")
        until(lambda: starts(home, node_id) > before, "the node started again by Retry")
        until(lambda: len(give_ups(monitor)) >= 3, "the give-up after that Retry")
        until(lambda: dunst.displayed() == 1, "dunst showing the new one")

        # The default action: the window opens on the node.
        assert not desktop.window_id("--name", "Nodes .* cadre-desktop")
        dunst.ctl("action", "0")
        until(lambda: desktop.window_id("--name", "Nodes .* cadre-desktop"), "the node window")
        until(lambda: f"window opened on node {node_id}" in log_path.read_text(errors="replace"),
              "the window on that node")


def mendable_node(marker: Path) -> list[str]:
    """The reference node, but exiting 3 with a stderr line while `marker` exists."""
    code = (f"import os, runpy, sys\nif os.path.exists({str(marker)!r}):\n"
            f"    sys.stderr.write('{STDERR_LINE}\\n'); sys.exit(3)\n"
            "runpy.run_module('cadre_desktop.node', run_name='__main__', alter_sys=True)\n")
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("desktop", ["trayer"], indirect=True)
def test_retry_pressed_in_the_notification_closes_it_once_the_node_is_back(desktop, dunst, monitor, tmp_path):
    """Regression: the notice acted on was forgotten, so the node coming back withdrew nothing
    and the red notification stayed on screen (Retry from the window or the CLI closed it)."""
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "broken"
    marker.touch()
    (home / "settings.json").write_text(json.dumps(fast_settings(node_command=mendable_node(marker),
                                                                 sweep_ms=250)))
    with running_app(desktop, home, tmp_path / "app.log"):
        until(lambda: (home / "control.json").exists(), "the control API")
        until(lambda: desktop.tray_box().width >= 16, "the icon in trayer")
        status, body = control_request(home, "POST", "/api/nodes", {"name": "Garage"})
        assert status in (200, 201), body
        node_id = body["id"]
        until(lambda: give_ups(monitor), "the give-up notification")
        until(lambda: dunst.displayed() == 1, "dunst showing it")

        marker.unlink()  # mended: the Retry brings it back
        dunst.ctl("context")  # Retry picked in dunst's own menu
        until(lambda: control_request(home, "GET", f"/api/nodes/{node_id}")[1].get("ready"), "the node back")
        until(lambda: monitor.calls("CloseNotification"), "the notice withdrawn")
        until(lambda: dunst.displayed() == 0, "nothing left on screen")


@pytest.mark.parametrize("desktop", ["trayer"], indirect=True)
def test_doctor_asks_the_notification_service_the_app_uses(desktop, tmp_path):
    """Regression: doctor's notification check asked Qt's tray ("supported" with no service at all)."""
    import subprocess

    home = tmp_path / "home"
    home.mkdir()
    env = {**desktop.env(), "CADRE_DESKTOP_HOME": str(home)}
    doctor = lambda: subprocess.run([sys.executable, "-m", "cadre_desktop", "doctor"], env=env,  # noqa: E731
                                    capture_output=True, text=True, timeout=120).stdout
    line = lambda out: next(x for x in out.splitlines() if "notifications:" in x)  # noqa: E731
    assert "no notification service answers" in line(doctor())  # a tray, but no service yet
    dunst = Dunst(tmp_path, desktop.env())
    try:
        assert "notification service answers, with buttons" in line(doctor())
    finally:
        dunst.stop()


def _given_up_and_clicked(desktop, dunst, monitor, home: Path, log_path: Path) -> str:
    """Add the node, wait for its give-up on screen, then click it (dunst's default action):
    the window opens on the node. The node's id."""
    until(lambda: (home / "control.json").exists(), "the control API")
    until(lambda: desktop.tray_box().width >= 16, "the icon in trayer")
    status, body = control_request(home, "POST", "/api/nodes", {"name": "Garage"})
    assert status in (200, 201), body
    node_id = body["id"]
    until(lambda: give_ups(monitor), "the give-up notification")
    until(lambda: dunst.displayed() == 1, "dunst showing it")
    dunst.ctl("action", "0")  # clicked: the window opens on the node
    until(lambda: f"window opened on node {node_id}" in log_path.read_text(errors="replace"),
          "the window on that node")
    return node_id


@pytest.mark.parametrize("desktop", ["trayer"], indirect=True)
def test_retry_pressed_after_a_click_retries_and_closes_the_notice_once_the_node_is_back(
        desktop, dunst, monitor, tmp_path):
    """Regression (issue 39): a click made desktop-notifier forget the notice, so its Retry
    reached the app and did nothing, and the node coming back withdrew nothing."""
    home, marker, log_path = tmp_path / "home", tmp_path / "broken", tmp_path / "app.log"
    home.mkdir()
    marker.touch()
    (home / "settings.json").write_text(json.dumps(fast_settings(node_command=mendable_node(marker),
                                                                 sweep_ms=250)))
    with running_app(desktop, home, log_path):
        node_id = _given_up_and_clicked(desktop, dunst, monitor, home, log_path)
        before = starts(home, node_id)
        marker.unlink()  # mended: the Retry brings it back
        dunst.ctl("context")  # Retry picked in dunst's own menu, after the click
        until(lambda: starts(home, node_id) > before, "the node started again by that Retry")
        until(lambda: control_request(home, "GET", f"/api/nodes/{node_id}")[1].get("ready"), "the node back")
        until(lambda: monitor.calls("CloseNotification"), "the notice withdrawn")
        until(lambda: dunst.displayed() == 0, "nothing left on screen")


@pytest.mark.parametrize("desktop", ["trayer"], indirect=True)
def test_a_clicked_notice_closes_when_a_retry_elsewhere_brings_its_node_back(desktop, dunst, monitor, tmp_path):
    """Regression (issue 39): after a click, the tray's (or the CLI's) Retry brought the node
    back and the red notification stayed on screen."""
    home, marker, log_path = tmp_path / "home", tmp_path / "broken", tmp_path / "app.log"
    home.mkdir()
    marker.touch()
    (home / "settings.json").write_text(json.dumps(fast_settings(node_command=mendable_node(marker),
                                                                 sweep_ms=250)))
    with running_app(desktop, home, log_path):
        node_id = _given_up_and_clicked(desktop, dunst, monitor, home, log_path)
        marker.unlink()
        assert control_request(home, "POST", f"/api/nodes/{node_id}/retry")[0] == 200  # the tray's Retry asks the same
        until(lambda: control_request(home, "GET", f"/api/nodes/{node_id}")[1].get("ready"), "the node back")
        until(lambda: monitor.calls("CloseNotification"), "the notice withdrawn")
        until(lambda: dunst.displayed() == 0, "nothing left on screen")


@pytest.mark.parametrize("desktop", ["trayer"], indirect=True)
def test_a_clicked_notice_closes_when_the_app_quits(desktop, dunst, monitor, tmp_path):
    """Regression (issue 39): a notice clicked once stayed on screen after the app quit (its
    Retry dead with it)."""
    home, log_path = tmp_path / "home", tmp_path / "app.log"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(fast_settings(node_command=BROKEN_NODE, sweep_ms=250)))
    with running_app(desktop, home, log_path) as app:
        _given_up_and_clicked(desktop, dunst, monitor, home, log_path)
        app.terminate()  # SIGTERM: the app quits as from the tray's Quit
        assert app.wait(timeout=60) == 0
    until(lambda: monitor.calls("CloseNotification"), "the notice withdrawn at quit")
    until(lambda: dunst.displayed() == 0, "nothing left on screen")
