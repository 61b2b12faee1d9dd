"""settings.json followed while the app runs, also when its folder is made after the app started
(a new user's normal state: issue 39, item 9)."""

from __future__ import annotations

import json

from cadre_desktop.settings import Settings
from cadre_desktop.ui.settings_store import SettingsWatcher, nearest_folder


def test_a_settings_file_whose_folder_is_made_after_the_start_is_taken(tmp_path, qtbot):
    """Regression: the watch was on a folder that was not there, so a hand edit was ignored."""
    path = tmp_path / "config" / "cadre-desktop" / "settings.json"
    watcher = SettingsWatcher(path, Settings())
    path.parent.mkdir(parents=True)
    with qtbot.waitSignal(watcher.changed, timeout=20_000) as taken:
        path.write_text(json.dumps({"notifications": False}))
    assert taken.args[0].notifications is False and watcher.current.notifications is False
    with qtbot.waitSignal(watcher.changed, timeout=20_000) as again:  # and followed from then on
        path.write_text(json.dumps({"notifications": True}))
    assert again.args[0].notifications is True


def test_the_folder_watched_is_the_nearest_that_exists(tmp_path):
    assert nearest_folder(tmp_path / "a" / "b") == tmp_path
    (tmp_path / "a").mkdir()
    assert nearest_folder(tmp_path / "a" / "b") == tmp_path / "a"
    (tmp_path / "a" / "b").write_text("not a folder")
    assert nearest_folder(tmp_path / "a" / "b") == tmp_path / "a"
