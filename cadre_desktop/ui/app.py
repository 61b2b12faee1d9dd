"""The tray application's entry point (placeholder until the tray lands)."""

from __future__ import annotations


def run_gui(argv: list[str] | None = None) -> int:
    import sys

    print("cadre-desktop: the tray app is not built yet; run `cadre-desktop --headless`.", file=sys.stderr)
    return 1
