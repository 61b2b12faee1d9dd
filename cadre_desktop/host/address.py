"""The address nodes advertise: the `advertise_host` setting, or this machine's LAN address."""

from __future__ import annotations

import socket


def detect_lan_address() -> str:
    """The local address the OS would use to reach the internet; no packet is sent.

    Connecting a UDP socket only picks a route. With no network at all this
    falls back to loopback, which still lets a browser on this machine claim.
    """
    for family, target in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect(target)
                addr = sock.getsockname()[0]
                if addr and not addr.startswith(("0.", "::")):
                    return addr
        except OSError:
            continue
    return "127.0.0.1"


def url_host(host: str) -> str:
    """A host as it appears in a URL: IPv6 literals need brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def claim_url(advertise_host: str, api_port: int, node_id: str, secret: str) -> str:
    """The URL a phone opens from the QR code; the secret rides in the fragment,
    which browsers never send to a server, so it never reaches a server log."""
    return f"http://{url_host(advertise_host)}:{api_port}/claim?node={node_id}#{secret}"
