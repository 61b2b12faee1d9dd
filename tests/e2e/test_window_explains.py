"""The window on a real desktop: a node in error explained, Preferences from the tray, any scale.

On Xvfb with `trayer`: a second launch opens the window on the node that needs
the person, whose details pane names its stderr line and the next step (its
screenshot goes to docs/screenshots/ as window-error.png and details.png);
Preferences opens from the tray menu (preferences.png). At QT_SCALE_FACTOR=2 on
a 1280x800 screen the window still fits the screen. A first start opens the window
with its welcome (welcome.png).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cadre_desktop.ui.tray.status import COLOURS, TrayState
from tests.support.e2e.desktop import REPO, Box, Desktop, keep, running_app
from tests.support.headless import control_request, fast_settings
from tests.support.polling import wait_until

pytestmark = pytest.mark.e2e
RED = COLOURS[TrayState.ERROR]
#: The real node, unless the home holds a file `broken`: then it names a device and dies.
SWITCHABLE_NODE = [sys.executable, "-c", (
    "import os, runpy, sys\n"
    "if os.path.exists(os.path.join(os.environ['CADRE_NODE_DIR'], '..', '..', 'broken')):\n"
    "    sys.exit('cannot open /dev/ttyUSB0: no such device')\n"
    "runpy.run_module('cadre_desktop.node', run_name='__main__')\n")]
WINDOW = "Nodes .* cadre-desktop"


def until(predicate, what: str, timeout: float = 30):
    return wait_until(predicate, timeout=timeout, interval=0.1, what=what)


def launch_second(desktop: Desktop, home: Path, **extra: str) -> int:
    """Another launch for the same home: it asks the first to show its window, and exits."""
    env = desktop.env(CADRE_DESKTOP_HOME=str(home), PYTHONPATH=str(REPO), **extra)
    return subprocess.run([sys.executable, "-m", "cadre_desktop"], env=env, capture_output=True,
                          timeout=60).returncode


def make_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(fast_settings(node_command=SWITCHABLE_NODE, sweep_ms=250,
                                                                 notifications=False)))
    return home


def test_the_window_explains_a_node_in_error_and_preferences_open_from_the_tray(desktop, tmp_path):
    home, log = make_home(tmp_path), tmp_path / "app.log"
    with running_app(desktop, home, log):
        until(lambda: (home / "control.json").exists() and desktop.tray_box().width >= 16, "the app in the tray")
        for name in ("Kitchen", "Attic"):
            assert control_request(home, "POST", "/api/nodes", {"name": name})[0] == 201
        until(lambda: all(n["status"] == "unclaimed" and n["ready"]
                          for n in control_request(home, "GET", "/api/nodes")[1]["nodes"]), "two nodes up")
        (home / "broken").write_text("")
        status, garage = control_request(home, "POST", "/api/nodes", {"name": "Garage"})
        assert status == 201
        until(lambda: control_request(home, "GET", f"/api/nodes/{garage['id']}")[1]["status"] == "error",
              "Garage given up on")

        assert launch_second(desktop, home) == 0
        window = until(lambda: desktop.visible(WINDOW), "the node window")
        until(lambda: f"window opened on node {garage['id']}" in log.read_text(errors="replace")
              or RED in desktop.screenshot(tmp_path / "w.png", window), "the window on Garage")
        colours = until(lambda: RED in (c := desktop.screenshot(tmp_path / "window.png", window)) and c,
                        "the red status of Garage")
        assert colours
        keep(tmp_path / "window.png", "window-error.png")
        # On this 1280-pixel screen the details go under the table (it needs the width for its columns).
        details = Box(window.x, window.y + window.height * 47 // 100, window.width,
                      window.height * 43 // 100)
        desktop.screenshot(tmp_path / "details.png", details)
        keep(tmp_path / "details.png", "details.png")

        # Preferences, from the tray menu: Quit is last, Preferences just above it.
        desktop.xdotool("key", "Escape")
        tray = desktop.tray_box()
        desktop.click(*tray.centre, button=3)
        until(lambda: desktop.visible("cadre-desktop", min_height=80), "the tray menu")
        desktop.keys("Up", "Up", "Return")
        prefs = until(lambda: desktop.visible("Preferences .* cadre-desktop"), "the Preferences dialog")
        desktop.screenshot(tmp_path / "prefs.png", prefs)
        keep(tmp_path / "prefs.png", "preferences.png")


def test_at_twice_the_scale_the_window_fits_a_1280x800_screen(desktop, tmp_path):
    home = make_home(tmp_path)
    with running_app(desktop, home, tmp_path / "app.log", QT_SCALE_FACTOR="2"):
        until(lambda: (home / "control.json").exists() and desktop.tray_box().width >= 16, "the app in the tray")
        assert launch_second(desktop, home, QT_SCALE_FACTOR="2") == 0
        window = until(lambda: desktop.visible(WINDOW), "the node window")
        assert window.x >= 0 and window.y >= 0
        assert window.x + window.width <= 1280 and window.y + window.height <= 800, window
        assert window.width >= 600  # it still takes most of the screen, not a sliver


def test_a_first_start_opens_the_window_with_its_welcome(desktop, tmp_path):
    """A new user sees where to look and what to do, not only a small icon (welcome.png)."""
    home, log = make_home(tmp_path), tmp_path / "app.log"
    with running_app(desktop, home, log, welcome=True):
        window = until(lambda: desktop.visible(WINDOW), "the window on the first start")
        until(lambda: desktop.tray_box().width >= 16, "the icon in the tray as well")
        shots: list[dict] = []  # a window still being painted differs from the next grab
        def painted() -> bool:
            shots.append(desktop.screenshot(tmp_path / "welcome.png", window))
            return shots[-2:-1] == shots[-1:]
        until(painted, "the window painted")
        keep(tmp_path / "welcome.png", "welcome.png")
