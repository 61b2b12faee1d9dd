"""`doctor`'s look at the desktop, in a process of its own.

A display Qt cannot open aborts the process that tries, so doctor runs this
as a child (`python -m cadre_desktop.ui.probe_display`, or the bundle's
`cadre-desktop --probe-display`) and reads one JSON line back.
"""

from __future__ import annotations

import json


def main() -> int:
    from PySide6.QtWidgets import QApplication, QSystemTrayIcon

    app = QApplication([])  # noqa: F841 - Qt needs it alive for the questions below
    print(json.dumps({"tray": QSystemTrayIcon.isSystemTrayAvailable(),
                      "messages": QSystemTrayIcon.supportsMessages()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
