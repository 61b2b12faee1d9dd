"""Keys and signatures as they travel: base64url without padding, Ed25519 checks.

A seed, an invitation and a borrower's request carry keys and signatures in this
form; the node signs and checks them, the host checks a borrower's seed. The
``cryptography`` import is deferred to the one call that needs it.
"""

from __future__ import annotations

import base64


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify_signature(public_key: bytes, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
