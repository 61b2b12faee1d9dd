"""The address nodes advertise: the `advertise_host` setting, or this machine's LAN address.

`ConfiguredAddress` is that policy; the address watcher (`host/core/ops/netwatch.py`)
asks it, holds the address the host advertises now, and acts when it changes.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from cadre_desktop.errors import SettingsError
from cadre_desktop.settings import Settings, load_settings
from cadre_desktop.text import url_host

log = logging.getLogger(__name__)


def detect_lan_address() -> str:
    """The local address the OS would use to reach the internet; no packet is sent.

    Connecting a UDP socket only picks a route. With no network at all this
    falls back to loopback, which still lets a browser on this machine claim.
    """
    for family, target in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect(target)
                addr: str = sock.getsockname()[0]
                if addr and not addr.startswith(("0.", "::")):
                    return addr
        except OSError:
            continue
    return "127.0.0.1"


def claim_url(advertise_host: str, api_port: int, node_id: str, secret: str) -> str:
    """The URL a phone opens from the QR code; the secret rides in the fragment,
    which browsers never send to a server, so it never reaches a server log."""
    return f"http://{url_host(advertise_host)}:{api_port}/claim?node={node_id}#{secret}"


class ConfiguredAddress:
    """The `advertise_host` setting as settings.json holds it now, else the LAN address.

    Re-reading the file lets a person change the advertised address without
    restarting the host; a file broken meanwhile keeps the setting last read.
    """

    def __init__(self, settings_file: Path, settings: Settings) -> None:
        self.settings_file = settings_file
        self.setting = settings.advertise_host

    def __call__(self) -> str:
        try:
            self.setting = load_settings(self.settings_file).advertise_host
        except SettingsError as exc:
            log.warning("the advertised address keeps its value: %s", exc.message)
        return self.setting or detect_lan_address()
