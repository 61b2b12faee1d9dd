"""asyncio without its TLS half, for the processes that speak plain HTTP only.

asyncio imports ``ssl`` for its TLS transports, and with it OpenSSL's libssl and
libcrypto: about 5 MB resident (bench/README.md, issue 26) and a few milliseconds
of every start. The node, the headless host and the tray app speak plain HTTP on
loopback or the LAN and never open a TLS connection. asyncio is built to run
without ``ssl`` (a Python built without OpenSSL), so while it is imported ``ssl``
is made unimportable; the entry is removed right after, so a later ``import ssl``
(a test, a plugin) still works as usual, only asyncio's own TLS support stays off.
"""

from __future__ import annotations

import sys


def import_asyncio() -> bool:
    """Import asyncio without ssl; False when either was already imported (nothing to gain)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return False
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]
    return True
