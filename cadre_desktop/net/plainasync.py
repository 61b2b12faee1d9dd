"""The standard library without OpenSSL, for the processes that never need it.

Two parts of the standard library load OpenSSL's shared libraries on import without
this program ever using them:

- asyncio imports ``ssl`` for its TLS transports (libssl and libcrypto, about 5 MB
  resident and a few milliseconds of every start). The node, the headless host and
  the tray app speak plain HTTP on loopback or the LAN and never open a TLS
  connection.
- ``hashlib``, ``hmac`` and ``secrets`` import ``_hashlib`` (libcrypto, about 3 MB
  resident: bench/README.md, issue 26) for SHA-256 digests, constant-time
  comparisons and random tokens. CPython ships its own SHA-2 and a constant-time
  compare for a build without OpenSSL, and ``secrets`` draws from ``os.urandom``
  either way; these processes hash a few short strings.

Both are what a Python built without OpenSSL runs: while these modules are imported,
``ssl`` and ``_hashlib`` are made unimportable, and the entries are removed right
after, so a later ``import ssl`` (a test, a plugin) still works as usual; only
asyncio's TLS support and hashlib's OpenSSL-only extras stay off in this process.
"""

from __future__ import annotations

import sys

_BLOCKED = ("ssl", "_hashlib")
_MODULES = ("asyncio", "hashlib", "hmac", "secrets")


def import_without_openssl() -> bool:
    """Import asyncio, hashlib, hmac and secrets (those not imported yet) without OpenSSL.
    True when OpenSSL's modules are still not loaded after it."""
    blocked = [name for name in _BLOCKED if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        for name in _MODULES:
            if name not in sys.modules:
                __import__(name)
    finally:
        for name in blocked:
            del sys.modules[name]
    return not any(name in sys.modules for name in _BLOCKED)


def enable_asyncio_tls() -> None:
    """Give asyncio its TLS transports back, in a process that imported it without OpenSSL.

    Only the fleet needs TLS (`host/fleet/`): a computer that joins one pays OpenSSL's memory
    from then on, one that never does never loads it. asyncio keeps the module it imported as
    ``ssl`` in three of its modules; a None there means "no TLS support". Nothing to do when
    asyncio came with ``ssl``.
    """
    import asyncio.base_events
    import asyncio.selector_events
    import asyncio.sslproto
    import ssl

    for module in (asyncio.base_events, asyncio.selector_events, asyncio.sslproto):
        if getattr(module, "ssl", None) is None:
            setattr(module, "ssl", ssl)  # noqa: B010 (asyncio's own name for it, set as it would have been)
    if not hasattr(asyncio.sslproto, "SSLAgainErrors"):
        setattr(asyncio.sslproto, "SSLAgainErrors", (ssl.SSLWantReadError, ssl.SSLSyscallError))  # noqa: B010
