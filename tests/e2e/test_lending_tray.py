"""Lending through the real tray app: Lend nodes… from the tray menu, the grant's QR code read
off the screen with zbarimg, a borrower lending a node with what was read, Quit."""

from __future__ import annotations

import json

import psutil
import pytest

from tests.support.borrower import borrow, free_lend_port
from tests.support.claim_link import read_qr
from tests.support.e2e.desktop import running_app
from tests.support.headless import control_get, fast_settings
from tests.support.polling import wait_until

pytestmark = pytest.mark.e2e


def until(predicate, what: str):
    return wait_until(predicate, timeout=20, interval=0.1, what=what)


def test_tray_app_lends_a_node_from_a_grant_read_off_the_screen(desktop, secret_service, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(fast_settings(lend_port=free_lend_port())))
    with running_app(desktop, home, tmp_path / "app.log") as app:
        until(lambda: app.poll() is None and desktop.tray_box().width >= 16, "the icon in the tray")
        # The icon shows before the engine starts, and Lend waits for the engine: wait for it too
        # (its control API is up once it is), or the click lands on a greyed item.
        until(lambda: (home / "control.json").exists(), "the engine up")
        tray = desktop.tray_box()
        desktop.click(*tray.centre, button=3)
        until(lambda: desktop.visible("cadre-desktop", min_height=80), "the tray menu")
        # Open window, Add node…, Join with invitation…, Lend nodes…
        desktop.keys("Down", "Down", "Down", "Down", "Return")
        until(lambda: desktop.visible("Lend nodes") and desktop.focused() == "Lend nodes", "the grant dialog")
        desktop.xdotool("type", "--delay", "30", "Alice")
        desktop.keys("Return")
        until(lambda: desktop.visible("Grant link .* Alice"), "the grant's link and QR code")

        screen = tmp_path / "screen.png"
        links = until(lambda: desktop.screenshot(screen) is not None and read_qr(screen), "a QR code on screen")
        (grant,) = control_get(home, "/api/grants")["grants"]
        assert links == [control_get(home, f"/api/grants/{grant['id']}/link")["link"]] and grant["label"] == "Alice"

        lent = borrow(links[0], "alices-cadre", tmp_path / "owner.json")
        assert lent.returncode == 0, lent.stderr
        donation = json.loads(lent.stdout)
        view = until(lambda: (d := control_get(home, f"/api/donations/{donation['id']}"))["running"] and d, "the lent node")
        assert view["status"] == "seeded" and view["party_id"] == "alices-cadre"

        desktop.keys("Escape")
        tray = desktop.tray_box()
        desktop.click(*tray.centre, button=3)
        until(lambda: desktop.visible("cadre-desktop", min_height=80), "the tray menu")
        desktop.keys("Up", "Return")  # Quit
        assert app.wait(timeout=30) == 0
        assert not psutil.pid_exists(view["pid"]) or psutil.Process(view["pid"]).status() == psutil.STATUS_ZOMBIE
