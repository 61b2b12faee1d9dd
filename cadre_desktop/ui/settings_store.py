"""Changing settings.json from the app, and noticing when someone else changed it.

A change is merged into the file's own document (keys the person set by hand
stay as they are), checked by the same rules as at start (`parse_settings`), and
written atomically with mode 0600. A file that is broken now is never
overwritten: the change is refused with the file's own error.

`SettingsWatcher` follows settings.json while the app runs: an edit that parses
is handed on as new settings; one that does not is refused, with its error,
and the settings in use stay as they were. A settings folder that is not there yet (a new
user's) is waited for from its nearest parent that is (`nearest_folder`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal

from cadre_desktop.errors import CadreError, SettingsError
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.settings import MAX_SETTINGS_BYTES, Settings, load_settings, parse_settings

log = logging.getLogger(__name__)

SETTLE_MS = 300


def read_doc(path: Path) -> dict[str, Any]:
    """The file's document as it is; a broken file raises its error (and is left alone)."""
    load_settings(path)  # the same checks, the same words
    try:
        return json.loads(read_bytes(path, max_bytes=MAX_SETTINGS_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return {}


def save_changes(path: Path, changes: dict[str, Any]) -> Settings:
    """Merge `changes` (None removes a key: back to its default), check, write; the new settings."""
    doc = read_doc(path)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    settings = parse_settings(doc, str(path))
    try:
        write_json_atomic(path, doc)
    except OSError as exc:
        raise SettingsError(f"{path}: cannot save settings: {exc.strerror or exc}") from None
    log.info("settings saved: %s", ", ".join(sorted(changes)) or "nothing changed")
    return settings


def nearest_folder(folder: Path) -> Path:
    """`folder`, or while it is not there its nearest parent that is: the one a watch can be on."""
    while not folder.is_dir() and folder.parent != folder:
        folder = folder.parent
    return folder


class SettingsWatcher(QObject):
    #: settings.json changed and parses: the new settings.
    changed = Signal(object)
    #: settings.json changed and does not parse: the error, in words.
    refused = Signal(str)

    def __init__(self, path: Path, current: Settings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path, self.current = path, current
        self._last_refusal = ""
        self._watcher = QFileSystemWatcher(self)
        # The folder too: an atomic replace (ours, an editor's) ends the watch on the file itself.
        self._watch_file()
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(SETTLE_MS)
        self._settle.timeout.connect(self.check)
        self._watcher.fileChanged.connect(lambda _: self._settle.start())
        self._watcher.directoryChanged.connect(self._folder_changed)

    def _folder_changed(self, _folder: str) -> None:
        self._watch_file()  # a folder made meanwhile is watched at once, before its file is written
        self._settle.start()

    def _watch_file(self) -> None:
        """Watch the settings' folder (or, not there yet, its nearest parent: issue 39) and the file."""
        folder = str(nearest_folder(self.path.parent))
        for old in self._watcher.directories():
            if old != folder:
                self._watcher.removePath(old)
        if folder not in self._watcher.directories():
            self._watcher.addPath(folder)
        if self.path.exists() and str(self.path) not in self._watcher.files():
            self._watcher.addPath(str(self.path))

    def accept(self, settings: Settings) -> None:
        """The app itself now uses these (it saved them): not news when the file says so."""
        self.current = settings
        self._last_refusal = ""

    def check(self) -> None:
        self._watch_file()
        try:
            settings = load_settings(self.path)
        except CadreError as exc:
            if exc.message != self._last_refusal:
                self._last_refusal = exc.message
                log.warning("settings.json changed but is refused: %s", exc.message)
                self.refused.emit(exc.message)
            return
        self._last_refusal = ""
        if settings != self.current:
            self.current = settings
            log.info("settings.json changed; applying it")
            self.changed.emit(settings)
