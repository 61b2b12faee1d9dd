"""The real tray app on a real desktop stack: Xvfb, trayer as the tray, gnome-keyring as the keyring.

Driven like a person would: right-click the tray icon, pick from the menu with
the keyboard, add a node in the window, read its QR code off the screen with
zbarimg, claim it over HTTP with what was read, and watch the row and the icon
turn green ("joined"), then Quit from the menu, answering that the node stops too.

The screenshots go to docs/screenshots/ (tray-menu.png, window.png,
qr-dialog.png) when they are missing there or CADRE_UPDATE_SCREENSHOTS=1, so
an ordinary run leaves the checkout clean.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadre_desktop.ui.tray.status import COLOURS, TrayState
from tests.support.claim_link import claim_when_up, read_qr
from tests.support.e2e.desktop import Box, keep, running_app
from tests.support.headless import control_get, fast_settings
from tests.support.polling import wait_until
from tests.support.processes import ended

pytestmark = pytest.mark.e2e
GREEN, BLUE = COLOURS[TrayState.JOINED], COLOURS[TrayState.UNCLAIMED]
#: The joined tray icon's fill, for light and for dark panels.
ICON_GREENS = {"#2e9e44", "#3fbf58"}


def until(predicate, what: str):
    return wait_until(predicate, timeout=20, interval=0.1, what=what)


def test_tray_app_adds_shows_qr_and_follows_a_claim(desktop, secret_service, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(fast_settings()))
    with running_app(desktop, home, tmp_path / "app.log") as app:
        # The icon docks in the tray, and the tray area is no longer empty.
        until(lambda: app.poll() is None and desktop.tray_box().width >= 16, "the icon in the tray")
        tray = desktop.tray_box()
        colours = until(lambda: len(c := desktop.screenshot(tmp_path / "tray.png", tray)) > 4 and c,
                        "an icon drawn in the tray")
        background = max(colours, key=colours.get)
        assert sum(n for c, n in colours.items() if c != background) > 40
        # Idle in the tray, it maps no Qt library it does not use (the single-instance socket is not Qt's).
        maps = Path(f"/proc/{app.pid}/maps").read_text()
        assert "libQt6Widgets" in maps and "libQt6Network" not in maps

        # Open the window through the menu.
        desktop.click(*tray.centre, button=3)
        until(lambda: desktop.visible("cadre-desktop", min_height=80), "the tray menu")
        desktop.keys("Down", "Return")
        window = until(lambda: desktop.visible("Nodes .* cadre-desktop"), "the node window")

        # Add a node in the window (Ctrl+N, a name, OK); its QR dialog opens by itself.
        desktop.keys("ctrl+n")
        until(lambda: desktop.visible("Add node") and desktop.focused() == "Add node", "the add dialog")
        desktop.xdotool("type", "--delay", "30", "Kitchen")
        desktop.keys("Return")
        qr_box = until(lambda: desktop.visible("Claim Kitchen"), "the QR dialog")

        # Read the claim URL off the screen, as a phone would.
        screen = tmp_path / "screen.png"
        urls = until(lambda: desktop.screenshot(screen) is not None and read_qr(screen), "a QR code on screen")
        node = control_get(home, "/api/nodes")["nodes"][0]
        assert urls == [node["claim_url"]] and node["name"] == "Kitchen"
        desktop.screenshot(tmp_path / "qr.png", qr_box)
        keep(tmp_path / "qr.png", "qr-dialog.png")

        # Claim over HTTP with what was read; the icon and the row turn green.
        status, body = claim_when_up(urls[0], "family")
        assert status == 200, body
        until(lambda: control_get(home, f"/api/nodes/{node['id']}")["status"] == "joined", "joined")
        until(lambda: ICON_GREENS & set(desktop.screenshot(tmp_path / "tray.png", desktop.tray_box())),
              "a joined tray icon")
        until(lambda: not desktop.visible("Claim Kitchen"), "the QR dialog to close itself")
        colours = until(lambda: GREEN in (c := desktop.screenshot(tmp_path / "window.png", window)) and c,
                        "a joined row")
        assert BLUE not in colours
        keep(tmp_path / "window.png", "window.png")

        # The menu names the node; then Quit, from the menu too. (The window steps aside for the picture.)
        desktop.xdotool("windowmove", desktop.window_id("--name", "Nodes .* cadre-desktop"), "0", "40")
        tray = desktop.tray_box()
        desktop.click(*tray.centre, button=3)
        menu = until(lambda: desktop.visible("cadre-desktop", min_height=80), "the tray menu")
        left = min(menu.x, tray.x) - 8
        box = Box(left, 0, 1280 - left, menu.y + menu.height + 8)
        shots: list[dict] = []  # a menu still being painted differs from the next grab

        def painted() -> bool:
            shots.append(desktop.screenshot(tmp_path / "menu.png", box))
            return shots[-2:-1] == shots[-1:]
        until(painted, "the menu painted")
        keep(tmp_path / "menu.png", "tray-menu.png")
        pid = control_get(home, f"/api/nodes/{node['id']}")["pid"]
        desktop.keys("Up", "Return")
        # A node runs: Quit asks whether to stop it; Return takes the default, stopping it.
        until(lambda: desktop.visible("Quit cadre-desktop"), "the quit question")
        desktop.keys("Return")
        assert app.wait(timeout=30) == 0
        assert ended(pid)
