"""Preferences offer the drivers there are (settings' `driver`) and save the one chosen."""

from __future__ import annotations

import json

from cadre_desktop.settings import DRIVERS
from cadre_desktop.ui.prefs.preferences import DRIVER_CHOICES


def test_preferences_offer_every_driver_and_save_systemd(shell, home, qtbot):
    assert [name for name, _ in DRIVER_CHOICES] == list(DRIVERS)
    dialog = shell.ask_preferences()
    assert dialog.driver.currentData() == "local"
    assert "start cold" in dialog.driver.itemText(dialog.driver.findData("systemd"))
    dialog.driver.setCurrentIndex(dialog.driver.findData("systemd"))
    dialog.accept()
    assert not dialog.isVisible(), dialog.error.text()
    assert json.loads((home / "settings.json").read_text())["driver"] == "systemd"
