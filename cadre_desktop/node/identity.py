"""The node's identity: an Ed25519 key pair kept in its work folder.

The key pair is created on the first start and reused on every later one, so a
respawned node has the same ``peer_id``. The file holds both raw keys (base64url)
in a small versioned JSON document; keeping the public key beside the private one
lets an ordinary start derive ``peer_id`` without importing ``cryptography`` (it costs
tens of milliseconds and megabytes a host running a hundred nodes would pay a
hundred times). The library is loaded only to create a key or to sign.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from cadre_desktop.files.atomicfile import write_bytes_atomic
from cadre_desktop.node.errors import CorruptFileError, NodeDirError
from cadre_desktop.wire.keys import b64url, b64url_decode

IDENTITY_FILE = "identity.json"
IDENTITY_VERSION = 1
PEER_ID_PREFIX = "cn1"


def peer_id_for(public_key: bytes) -> str:
    """``cn1`` + the first 20 bytes of the key's SHA-256, in lower-case base32.

    Short enough to read aloud or show in a table, long enough (160 bits) that two
    nodes never collide.
    """
    digest = hashlib.sha256(public_key).digest()[:20]
    return PEER_ID_PREFIX + base64.b32encode(digest).decode("ascii").lower()


@dataclass(frozen=True)
class Identity:
    private_key: bytes  # 32-byte Ed25519 seed
    public_key: bytes  # 32 bytes

    @property
    def peer_id(self) -> str:
        return peer_id_for(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """Sign ``message``; refuses a file whose two keys do not belong together."""
        key = _private_key_object(self.private_key)
        if _public_bytes(key.public_key()) != self.public_key:
            raise CorruptFileError(
                f"{IDENTITY_FILE}: the public key does not match the private key"
            )
        return key.sign(message)

    def __repr__(self) -> str:
        return f"Identity(peer_id={self.peer_id!r})"


def load_or_create_identity(node_dir: Path) -> Identity:
    """Read the identity file, or create it if the folder has none yet."""
    path = node_dir / IDENTITY_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return _create(path)
    except OSError as err:
        raise NodeDirError(f"cannot read {path}: {err.strerror}") from None
    return _parse(path, raw)


def _parse(path: Path, raw: bytes) -> Identity:
    def corrupt(why: str) -> CorruptFileError:
        return CorruptFileError(
            f"identity file {path} is unreadable ({why}); it was left as is. "
            "Move it away to give this node a new identity (its peer id will change)."
        )

    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise corrupt("not JSON") from None
    if not isinstance(doc, dict):
        raise corrupt("not a JSON object")
    if doc.get("version") != IDENTITY_VERSION:
        raise corrupt(f"unknown version {doc.get('version')!r}")
    if doc.get("kind") != "ed25519":
        raise corrupt("not an ed25519 key")
    try:
        private_key = b64url_decode(doc["private_key"])
        public_key = b64url_decode(doc["public_key"])
    except (KeyError, TypeError, ValueError):
        raise corrupt("missing or malformed key") from None
    if len(private_key) != 32 or len(public_key) != 32:
        raise corrupt("keys have the wrong length")
    return Identity(private_key=private_key, public_key=public_key)


def _create(path: Path) -> Identity:
    private_key, public_key = _new_key_pair()
    identity = Identity(private_key=private_key, public_key=public_key)
    doc = {
        "version": IDENTITY_VERSION,
        "kind": "ed25519",
        "private_key": b64url(identity.private_key),
        "public_key": b64url(identity.public_key),
    }
    try:
        write_bytes_atomic(path, json.dumps(doc, indent=2).encode() + b"\n")
    except OSError as err:
        raise NodeDirError(f"cannot write {path}: {err.strerror}") from None
    return identity


def _new_key_pair() -> tuple[bytes, bytes]:
    """A fresh (seed, public key), made where `cryptography` does not stay loaded if possible.

    A first start would otherwise carry the library (about 8 MB resident) for
    the whole life of the node, though only creating the key needed it. On
    POSIX the key is made in a forked child that hands the 64 bytes back
    through a pipe and exits; the node has no threads yet, so forking is safe.
    """
    if not _can_fork():
        return _generate()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: make the key, hand it over, leave without any clean-up of the parent's
        code = 1
        try:
            os.close(read_end)
            seed, public = _generate()
            os.write(write_end, seed + public)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        data = b""
        while len(data) < 64:
            chunk = os.read(read_end, 64 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if len(data) != 64:
        return _generate()  # the child failed (out of memory?): make it here after all
    return data[:32], data[32:]


def _can_fork() -> bool:
    return hasattr(os, "fork") and sys.platform != "darwin"  # macOS: fork after Objective-C runtime use is unsafe


def _generate() -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    return key.private_bytes_raw(), _public_bytes(key.public_key())


def _private_key_object(seed: bytes):  # -> Ed25519PrivateKey, imported lazily
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(seed)


def _public_bytes(public_key) -> bytes:  # Ed25519PublicKey, imported lazily
    return public_key.public_bytes_raw()
