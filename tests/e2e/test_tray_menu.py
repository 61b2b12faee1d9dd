"""The tray menu as a StatusNotifierItem host sees it, with 30 nodes.

Under `gtk-sni-tray-standalone`: the item registers with the watcher; the menu it
exports over com.canonical.dbusmenu shows the summary, at most five nodes (each
with its Retry), *Show all…* and the fixed items ending in *Quit*; and while
nothing changes, not one layout or property signal crosses the bus, even with
the window open and the table refreshing every second.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from cadre_desktop.ui.tray.tray import NODE_SLOTS
from tests.support import port_blocks
from tests.support.e2e.bus import Monitor, menu_layout, registered_items
from tests.support.e2e.desktop import REPO, running_app, start_desktop
from tests.support.headless import control_request, fast_settings
from tests.support.polling import wait_until

pytestmark = pytest.mark.e2e
NODES = 30
BROKEN_NODE = [sys.executable, "-c", "import sys; sys.exit('no such device')"]
FIXED = ["Open window", "Add node…", "Join with invitation…", "Lend nodes…", "Add a computer…", "Join computers…", "Pause all",
         "Preferences…", "Quit"]
QUIET_S = 3.0  # three ticks of the window's one-second refresh


def until(predicate, what: str, timeout: float = 60):
    return wait_until(predicate, timeout=timeout, interval=0.1, what=what)


@pytest.fixture
def desktop(tmp_path, secret_service):
    desktop = start_desktop(tmp_path, secret_service, tray="sni")
    yield desktop
    desktop.stop()


def visible_labels(entries: list[dict]) -> list[str]:
    return [e.get("label", "").replace("_", "") for e in entries
            if e.get("visible", True) and e.get("type") != "separator"]


def test_sni_menu_with_30_nodes_is_capped_and_silent_while_nothing_changes(desktop, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    settings = fast_settings(node_command=BROKEN_NODE, sweep_ms=250, notifications=False,
                             respawn_max_attempts=1)
    low = port_blocks.take(2 * NODES + 10, 20000, 30000)  # more than fast_settings' 50, held as those are
    settings["port_range"] = [low, low + 2 * NODES + 9]
    (home / "settings.json").write_text(json.dumps(settings))
    env = desktop.env(CADRE_DESKTOP_HOME=str(home), PYTHONPATH=str(REPO))
    address = desktop.bus_env["DBUS_SESSION_BUS_ADDRESS"]
    monitor = Monitor(address, tmp_path / "bus.log", "type='signal',interface='com.canonical.dbusmenu'")
    with running_app(desktop, home, tmp_path / "app.log"):
        item = until(lambda: registered_items(address), "the item registered with the watcher")[0]
        until(lambda: (home / "control.json").exists(), "the control API")
        for i in range(NODES):
            status, body = control_request(home, "POST", "/api/nodes", {"name": f"Pump {i:02d}"})
            assert status == 201, body
        until(lambda: all(n["status"] == "error" for n in control_request(home, "GET", "/api/nodes")[1]["nodes"]),
              "every node given up on")

        labels = until(lambda: (shown := visible_labels(menu_layout(address, item)[1]))[0].startswith(f"{NODES} nodes")
                       and shown, "the summary of 30 nodes")
        assert labels[0] == f"{NODES} nodes: 0 running, {NODES} need you"
        nodes = [t for t in labels if re.fullmatch(r"Pump \d\d: Error", t)]
        retries = [t for t in labels if re.fullmatch(r"Retry Pump \d\d", t)]
        assert len(nodes) == NODE_SLOTS and len(retries) == NODE_SLOTS
        assert labels[-len(FIXED) - 1:] == [f"Show all {NODES} nodes…", *FIXED]
        assert len(labels) == 1 + 2 * NODE_SLOTS + 1 + len(FIXED)

        # Open the window (a second launch asks the first to): the table refreshes every second.
        second = subprocess.run([sys.executable, "-m", "cadre_desktop"], env=env, capture_output=True, timeout=60)
        assert second.returncode == 0
        until(lambda: desktop.window_id("--name", "Nodes .* cadre-desktop"), "the node window")
        revision = menu_layout(address, item)[0]
        signals = monitor.count("LayoutUpdated") + monitor.count("ItemsPropertiesUpdated")
        assert signals > 0  # the monitor does see the menu's changes (the 30 nodes coming)
        quiet_until = time.monotonic() + QUIET_S
        while time.monotonic() < quiet_until:  # a measurement window: nothing may arrive in it
            assert monitor.count("LayoutUpdated") + monitor.count("ItemsPropertiesUpdated") == signals
            time.sleep(0.1)
        assert menu_layout(address, item)[0] == revision
    monitor.stop()
