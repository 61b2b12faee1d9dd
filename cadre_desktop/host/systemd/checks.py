"""What doctor (and the driver's factory) ask about this computer's systemd user manager.

Where the manager is: the user bus in its runtime folder (`$XDG_RUNTIME_DIR/bus`, which on a
desktop is the session bus too), else `DBUS_SESSION_BUS_ADDRESS`; and only where a user
manager runs (`$XDG_RUNTIME_DIR/systemd`).
Whether the person's manager lingers (logind's `/var/lib/systemd/linger/<user>`): without
it the manager, and every unit in it, ends when the person's last session does, so nodes
left running at a Quit end at logout; with it they run until the computer stops.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from pathlib import Path

LINGER_DIR = Path("/var/lib/systemd/linger")


def manager_address(env: Mapping[str, str] | None = None, uid: int | None = None) -> str | None:
    """The session bus a systemd user manager is on, or None: no bus, or no user manager."""
    env = os.environ if env is None else env
    uid = (os.getuid() if hasattr(os, "getuid") else 0) if uid is None else uid
    runtime = Path(env.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}")
    if not (runtime / "systemd").is_dir():
        return None
    bus = runtime / "bus"  # the user bus the manager's own dbus.socket makes: the manager is on it
    if bus.exists():
        return f"unix:path={bus}"
    return env.get("DBUS_SESSION_BUS_ADDRESS") or None


def lingering(user: str | None = None, linger_dir: Path = LINGER_DIR) -> bool:
    """Whether logind keeps this user's manager running without a session (`loginctl enable-linger`)."""
    try:
        name = user or getpass.getuser()
    except (KeyError, OSError):
        return False
    return (linger_dir / name).exists()


def linger_words(on: bool) -> str:
    if on:
        return ("lingering is on: your user manager runs without a session, so nodes left running at a Quit "
                "keep running after you log out")
    return ("lingering is off: at logout your user manager ends, and with it every node left running at a Quit; "
            "`loginctl enable-linger` keeps them running")


def manager_words(address: str | None) -> tuple[bool, str]:
    """(fine, words) for doctor: whether the driver has a user manager to start units with."""
    if address is None:
        return False, ("no systemd user manager found (no $XDG_RUNTIME_DIR/systemd or no session bus): "
                       "the 'systemd' driver cannot start nodes here; use driver 'local'")
    return True, f"systemd user manager on {address}; each node is a transient unit, started cold " \
                 "(no warm standby, no fork server)"
