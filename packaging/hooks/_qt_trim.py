"""Which Qt plugins and data the bundle keeps: what a tray icon, a window and dialogs need.

PyInstaller's PySide6 hooks collect every plugin of each type a Qt module owns
(the virtual keyboard input context alone pulls in QtQuick and QtQml, ~40 MB).
The hooks beside this file call the stock hook, then keep only the plugins named
here, before binary dependency analysis, so the libraries only a dropped plugin
needs never enter the bundle. Qt's translations are dropped: the app is English.
"""

import os
import re

KEEP_PLUGINS = {
    # Linux: X11, Wayland, and offscreen (tests, `doctor` without a display);
    # macOS: cocoa; Windows: windows.
    "platforms": r"q(xcb|offscreen|wayland[-\w]*|cocoa|windows)\.",
    "platforms/darwin": r".",
    # The desktop's colour scheme (dark panels) and file dialogs through the portal.
    "platformthemes": r"xdgdesktopportal",
    # Typing accented and CJK text into the name and invitation fields.
    "platforminputcontexts": r"(compose|ibus)",
    # The tray icons are SVG; PNG is built into QtGui; ICO for Windows.
    "imageformats": r"q(svg|ico)\.",
    "iconengines": r".",
    "styles": r".",
    "xcbglintegrations": r".",
    "wayland-shell-integration": r"xdg-shell",
    "wayland-decoration-client": r".",
    "accessiblebridge": r".",
}


def _plugin_kind(dest):
    parts = dest.replace("\\", "/").split("/")
    if "plugins" not in parts:
        return None
    return "/".join(parts[parts.index("plugins") + 1:])


def keep_binary(src, dest):
    kind = _plugin_kind(dest)
    if kind is None:
        return True
    pattern = KEEP_PLUGINS.get(kind)
    return pattern is not None and re.search(pattern, os.path.basename(src)) is not None


def keep_data(src, dest):
    return "translations" not in dest.replace("\\", "/").split("/")


def trim(hiddenimports, binaries, datas):
    return (hiddenimports,
            [(s, d) for s, d in binaries if keep_binary(s, d)],
            [(s, d) for s, d in datas if keep_data(s, d)])
