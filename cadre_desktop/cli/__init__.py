"""The command-line front ends: the admin commands (`commands`, `lending`), `doctor`,
the headless host (`headless`) and the control API's client (`client`).

The tray app is the other front end (`cadre_desktop.ui`); both sit on the engine
(`cadre_desktop.host`) and the shared basics at the package's top level.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """`cadre-desktop`. The two starts (no argument: the tray app; `--headless`) go straight to
    `start.py`; everything else is parsed by `commands.py` (`--help` lists it all)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in ([], ["--headless"]):
        from cadre_desktop.cli.start import start

        return start(args)
    from cadre_desktop.cli.commands import main as run_command

    return run_command(args)


__all__ = ["main"]
