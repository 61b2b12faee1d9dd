"""The command-line front ends: the admin commands (`commands`, `lending`), `doctor`,
the headless host (`headless`) and the control API's client (`client`).

The tray app is the other front end (`cadre_desktop.ui`); both sit on the engine
(`cadre_desktop.host`) and the shared basics at the package's top level.
"""

from cadre_desktop.cli.commands import main

__all__ = ["main"]
