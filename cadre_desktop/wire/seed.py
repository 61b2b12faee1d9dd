"""Seeds: how a borrower's owner admits a donated node into their party.

A host may *lend* a node to a cadre that is not its owner's (see
docs/node-contract.md §10). That node starts knowing only the party it is for
and the public keys of that party's owners (``CADRE_OWNER_KEYS``); it waits,
``awaiting_seed``, until one of those owners sends a *seed*: a small signed
statement "this node, with this peer id, serving this donation, is ours".

The seed is bound to everything that could be swapped: the donation, the party
and the node's own ``peer_id``, so a seed for one node cannot be replayed onto
another, nor a seed for one party onto a node lent to a second. The signature
is Ed25519 over a fixed line-based message (no JSON canonicalisation to get
wrong), like the join proof of invitations.

This module is shared by the node (which verifies) and the reference borrower
(which signs); ``cryptography`` is imported only when a key is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from cadre_desktop.errors import InputError
from cadre_desktop.wire.keys import b64url, b64url_decode, verify_signature

SEED_VERSION = 1
SEED_PROOF_TAG = "cadre-seed-v1"
#: Ids the host hands out and party names a borrower picks share one shape: they
#: end up in folder names, logs and tables, so nothing that could escape a line.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PEER_ID_PATTERN = re.compile(r"cn1[a-z2-7]{32}")
KEY_BYTES = 32
SIGNATURE_BYTES = 64
MAX_OWNER_KEYS = 8
MAX_BOOTSTRAP_NODES = 16
MAX_BOOTSTRAP_CHARS = 256
PROFILES = ("storage", "transaction")
#: The profile of a request, or of a node's environment, that names none.
DEFAULT_PROFILE = PROFILES[0]
#: The profiles as an error message names them: 'storage' or 'transaction'.
PROFILE_WORDS = " or ".join(repr(profile) for profile in PROFILES)


class SeedError(InputError):
    """A seed (or a key) that is not what it must be; the message names the field."""

    code = "invalid_seed"


@dataclass(frozen=True)
class Seed:
    donation_id: str
    party_id: str
    peer_id: str
    owner_key: bytes
    signature: bytes

    def message(self) -> bytes:
        return seed_message(self.donation_id, self.party_id, self.peer_id, self.owner_key)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": SEED_VERSION,
            "donation_id": self.donation_id,
            "party_id": self.party_id,
            "peer_id": self.peer_id,
            "owner_key": b64url(self.owner_key),
            "signature": b64url(self.signature),
        }

    def verifies(self) -> bool:
        return verify_signature(self.owner_key, self.signature, self.message())


def seed_message(donation_id: str, party_id: str, peer_id: str, owner_key: bytes) -> bytes:
    """The bytes an owner signs: five lines, no trailing newline."""
    return "\n".join((SEED_PROOF_TAG, donation_id, party_id, peer_id, b64url(owner_key))).encode()


def is_id(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def parse_key(text: Any, what: str = "owner key") -> bytes:
    """A base64url Ed25519 public key of exactly 32 bytes."""
    if not isinstance(text, str) or not 1 <= len(text) <= 64 or not text.isascii():
        raise SeedError(f"{what} must be a base64url Ed25519 public key")
    try:
        key = b64url_decode(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES or b64url(key) != text.rstrip("="):
        raise SeedError(f"{what} must be {KEY_BYTES} bytes in base64url")
    return key


def check_bootstrap_address(text: Any) -> str:
    """One bootstrap address (a multiaddr or host:port): bounded, printable, no spaces or commas."""
    if (
        not isinstance(text, str)
        or not 1 <= len(text) <= MAX_BOOTSTRAP_CHARS
        or not text.isascii()
        or not text.isprintable()
        or any(ch.isspace() or ch == "," for ch in text)
    ):
        raise SeedError(
            f"a bootstrap address must be 1 to {MAX_BOOTSTRAP_CHARS} printable ASCII "
            "characters without spaces or commas"
        )
    return text


def parse_seed(doc: Any) -> Seed:
    """Check the shape of a seed document; the signature is checked by the caller."""
    if not isinstance(doc, dict):
        raise SeedError("'seed' must be a JSON object")
    if doc.get("version") != SEED_VERSION or isinstance(doc.get("version"), bool):
        raise SeedError(f"seed 'version' must be {SEED_VERSION}")
    unknown = sorted(set(doc) - {"version", "donation_id", "party_id", "peer_id", "owner_key", "signature"})
    if unknown:
        raise SeedError(f"seed has unknown field(s): {', '.join(k[:20] for k in unknown[:4])}")
    for name in ("donation_id", "party_id"):
        if not is_id(doc.get(name)):
            raise SeedError(f"seed '{name}' must be 1 to 64 of A-Z a-z 0-9 . _ -")
    peer_id = doc.get("peer_id")
    if not isinstance(peer_id, str) or PEER_ID_PATTERN.fullmatch(peer_id) is None:
        raise SeedError("seed 'peer_id' must be a node's peer id (cn1...)")
    owner_key = parse_key(doc.get("owner_key"), "seed 'owner_key'")
    signature_text = doc.get("signature")
    if not isinstance(signature_text, str) or not 1 <= len(signature_text) <= 128 or not signature_text.isascii():
        raise SeedError("seed 'signature' must be base64url")
    try:
        signature = b64url_decode(signature_text)
    except ValueError:
        signature = b""
    if len(signature) != SIGNATURE_BYTES:
        raise SeedError(f"seed 'signature' must be {SIGNATURE_BYTES} bytes in base64url")
    return Seed(doc["donation_id"], doc["party_id"], peer_id, owner_key, signature)


def sign_seed(private_key: bytes, donation_id: str, party_id: str, peer_id: str) -> Seed:
    """Make a seed with an owner's raw 32-byte Ed25519 private key (the borrower's side)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(private_key)
    public = key.public_key().public_bytes_raw()
    signature = key.sign(seed_message(donation_id, party_id, peer_id, public))
    return Seed(donation_id, party_id, peer_id, public, signature)
