"""Tray icons, one per aggregate state, in four variants.

The SVGs live in `cadre_desktop/ui/icons/` (inside the package, so an installed
wheel or a bundle finds them): `<state>-light.svg` and `<state>-dark.svg` in
colour for light and dark panels, `<state>-mono-light.svg` (dark strokes) and
`<state>-mono-dark.svg` (light strokes) when the `monochrome_icon` setting is
on. Shape and colour both differ per state, so the state reads without colour.
`app.svg` is the application's own icon (windows, app menu, autostart entry);
`ALERT_ICON` (the red warning sign) a critical notification's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QIcon

from cadre_desktop.ui.tray.status import TrayState

ICON_DIR = Path(__file__).resolve().parent.parent / "icons"
APP_ICON = ICON_DIR / "app.svg"
#: A critical notification's icon (a give-up): the red warning sign, not the app's own icon.
ALERT_ICON = ICON_DIR / "error-light.svg"


def panel_is_dark() -> bool:
    """Our best guess at the panel's shade: the desktop's colour scheme, else the palette."""
    hints = QGuiApplication.styleHints()
    scheme = hints.colorScheme() if hasattr(hints, "colorScheme") else Qt.ColorScheme.Unknown
    if scheme != Qt.ColorScheme.Unknown:
        return scheme == Qt.ColorScheme.Dark
    return QGuiApplication.palette().window().color().lightness() < 128


def icon_path(state: TrayState, *, monochrome: bool, dark_panel: bool) -> Path:
    variant = ("mono-" if monochrome else "") + ("dark" if dark_panel else "light")
    return ICON_DIR / f"{state.value}-{variant}.svg"


class TrayIcons:
    def __init__(self, monochrome: bool) -> None:
        self.monochrome = monochrome
        self._cache: dict[tuple[TrayState, bool], QIcon] = {}

    def icon(self, state: TrayState) -> QIcon:
        dark = panel_is_dark()
        key = (state, dark)
        if key not in self._cache:
            icon = QIcon(str(icon_path(state, monochrome=self.monochrome, dark_panel=dark)))
            # macOS tints a mask icon to match the menu bar itself.
            icon.setIsMask(self.monochrome and sys.platform == "darwin")
            self._cache[key] = icon
        return self._cache[key]
