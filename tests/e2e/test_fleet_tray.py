"""Two computers of one fleet: a node of the headless one gives up, and the other's tray tells it, once.

A real tray app (its own home, fleet port) on Xvfb with trayer, dunst owning
org.freedesktop.Notifications, and a real headless host (its own home, keyring file and fleet
port) with a node that exits at once; the two paired by code through their control APIs.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.support import port_blocks
from tests.support.e2e.bus import Monitor
from tests.support.e2e.desktop import running_app
from tests.support.fleet_hosts import fleet_host
from tests.support.headless import control_request, fast_settings
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
BROKEN_NODE = [sys.executable, "-c", "import sys; sys.stderr.write('no disk\\n'); sys.exit(3)"]


def told(monitor: Monitor) -> list[str]:
    return [c for c in monitor.calls("Notify") if 'string "Garage stopped on bravo"' in c]


def test_a_headless_computers_give_up_is_told_once_by_the_fleets_tray(desktop, dunst, monitor, tmp_path):
    home = tmp_path / "alpha"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(fast_settings(
        fleet_port=port_blocks.take(1, 20000, 30000), computer_name="alpha")))
    bravo = fleet_host(tmp_path, "bravo", node_command=BROKEN_NODE, sweep_ms=250)
    bravo.start()
    try:
        with running_app(desktop, home, tmp_path / "app.log"):
            wait_until(lambda: (home / "control.json").exists(), timeout=60, what="the tray app's control API")
            status, code = control_request(home, "POST", "/api/fleet/invite", {})
            assert status == 201, code
            status, body = bravo.api("POST", "/api/fleet/join", {"code": code["code"], "address": code["address"]})
            assert status == 200, body
            status, body = bravo.api("POST", "/api/nodes", {"name": "Garage"})
            assert status == 201, body
            wait_until(lambda: bravo.node(body["id"])["status"] == "error", timeout=60, interval=0.2,
                       what="bravo gave up on its node")
            first = wait_until(lambda: told(monitor), timeout=60, interval=0.2, what="the tray telling it")
            assert len(first) == 1 and "no disk" in first[0]
            wait_until(lambda: dunst.displayed() == 1, timeout=30, what="dunst showing it")
    finally:
        bravo.stop()
