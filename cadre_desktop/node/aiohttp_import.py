"""Import aiohttp without paying for CA certificates the node never uses.

aiohttp builds its two default HTTPS client contexts when it is imported, and the
verified one loads every CA certificate on the system: on a small machine that is
about 50 ms and 2 MB per process, and a host runs up to a hundred nodes. The node
only ever speaks plain HTTP (its API, and redeeming an invitation at another node's
API), so while aiohttp is imported OpenSSL is pointed at no certificates.

The environment is restored right after (a user's own ``SSL_CERT_FILE`` and
``SSL_CERT_DIR`` included), so any TLS context created later loads certificates as
usual; only aiohttp's two import-time defaults have none, which makes an
``https://`` request through them fail loudly rather than go unverified.
"""

from __future__ import annotations

import os
import sys

_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")


def import_aiohttp() -> None:
    if "aiohttp" in sys.modules:
        return
    saved = {name: os.environ.get(name) for name in _VARIABLES}
    for name in _VARIABLES:
        os.environ[name] = os.devnull
    try:
        import aiohttp.web  # noqa: F401
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
