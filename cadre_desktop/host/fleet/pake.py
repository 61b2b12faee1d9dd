"""Pairing by a code, sans-IO: SPAKE2 over the code, then each side's identity sealed under its key.

The exchange, in frames of JSON (`pairing.py` carries them; the inviter is SPAKE2's B side):

1. joiner → `{"t": "hello", "slot", "pake"}`: which invitation, and its SPAKE2 message;
2. inviter → `{"t": "pake", "pake"}`: its own message, fresh for every try;
3. joiner → `{"t": "sealed", "box"}`: its identity (id, name, address, certificate), sealed with
   AES-GCM under a key drawn (HKDF-SHA256) from the SPAKE2 key with the transcript (the slot and
   both messages) as salt, the transcript as associated data;
4. inviter → `{"t": "sealed", "box"}`: its own identity and the computers it introduces;
5. joiner → `{"t": "sealed", "box"}`: its confirmation; only then does the inviter pin it.

A wrong code gives the two sides different keys: the first sealed box does not open, which is a
wrong try (`pairing_code.Invitations.wrong`). A replayed transcript meets a fresh SPAKE2 message
from the inviter, hence another key, and fails the same way; a used code is gone. Nothing here
writes, logs or raises the code or a key.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cadre_desktop.errors import InvalidState
from cadre_desktop.host.fleet.pairing_code import Code, CodeRefused, Invitation, Invitations

VERSION = 1
MAX_FRAME = 64 * 1024
_ID_JOINER, _ID_INVITER = b"cadre-fleet-joiner", b"cadre-fleet-inviter"
_CONFIRM = b'"confirmed"'


class PairingBroken(InvalidState):
    """The other side spoke out of turn or sent what is not a pairing frame."""

    code = "pairing_failed"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(frame: dict[str, Any], key: str) -> bytes:
    value = frame.get(key)
    if not isinstance(value, str) or len(value) > MAX_FRAME:
        raise PairingBroken("The other computer sent a broken pairing message.")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise PairingBroken("The other computer sent a broken pairing message.") from None


class _Sealer:
    """Both directions' AEAD keys from the SPAKE2 key and the transcript; a counter per direction."""

    def __init__(self, key: bytes, transcript: bytes, *, joiner: bool) -> None:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        def derive(info: bytes) -> AESGCM:
            return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=transcript, info=info).derive(key))

        to_inviter, to_joiner = derive(b"joiner to inviter"), derive(b"inviter to joiner")
        self._out, self._in = (to_inviter, to_joiner) if joiner else (to_joiner, to_inviter)
        self._aad = transcript
        self._sent = self._read = 0

    def seal(self, data: bytes) -> dict[str, Any]:
        nonce = self._sent.to_bytes(12, "big")
        self._sent += 1
        return {"t": "sealed", "box": _b64(self._out.encrypt(nonce, data, self._aad))}

    def open(self, frame: dict[str, Any]) -> bytes | None:
        """The plain text, or None when the box does not open (another key: a wrong code)."""
        from cryptography.exceptions import InvalidTag

        if frame.get("t") != "sealed":
            raise PairingBroken("The other computer sent a broken pairing message.")
        nonce = self._read.to_bytes(12, "big")
        self._read += 1
        try:
            return bytes(self._in.decrypt(nonce, _unb64(frame, "box"), self._aad))
        except InvalidTag:
            return None


def _transcript(slot: int, joiner_msg: bytes, inviter_msg: bytes) -> bytes:
    digest = hashlib.sha256(b"cadre-fleet-pairing-v1\0")
    for part in (str(slot).encode(), joiner_msg, inviter_msg):
        digest.update(len(part).to_bytes(4, "big") + part)
    return digest.digest()


def _doc(data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except ValueError:
        raise PairingBroken("The other computer sent a broken pairing message.") from None
    if not isinstance(doc, dict):
        raise PairingBroken("The other computer sent a broken pairing message.")
    return doc


class JoinerSession:
    """The joining computer's side: `hello`, then `on_pake`, then `on_sealed` (the inviter's identity)."""

    def __init__(self, code: Code, identity: dict[str, Any]) -> None:
        from spake2 import SPAKE2_A

        self._code = code
        self._identity = identity
        self._spake = SPAKE2_A(code.secret.encode(), idA=_ID_JOINER, idB=_ID_INVITER)
        self._msg = b""
        self._sealer: _Sealer | None = None

    def hello(self) -> dict[str, Any]:
        self._msg = self._spake.start()
        return {"t": "hello", "v": VERSION, "slot": self._code.slot, "pake": _b64(self._msg)}

    def on_pake(self, frame: dict[str, Any]) -> dict[str, Any]:
        if frame.get("t") == "refused":
            raise CodeRefused(str(frame.get("message", "The other computer refused the code."))[:300])
        if frame.get("t") != "pake" or self._sealer is not None:
            raise PairingBroken("The other computer sent a broken pairing message.")
        theirs = _unb64(frame, "pake")
        try:
            key = self._spake.finish(theirs)
        except Exception:  # spake2 raises its own kinds for a message that is not a group element
            raise PairingBroken("The other computer sent a broken pairing message.") from None
        self._sealer = _Sealer(key, _transcript(self._code.slot, self._msg, theirs), joiner=True)
        return self._sealer.seal(json.dumps(self._identity).encode())

    def on_sealed(self, frame: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The inviter's identity and the confirmation to send; CodeRefused when it refused the code."""
        if frame.get("t") == "refused" or self._sealer is None:
            raise CodeRefused(str(frame.get("message", "The code was refused.")).strip()[:300] or "The code was refused.")
        plain = self._sealer.open(frame)
        if plain is None:
            raise PairingBroken("The other computer's answer did not open under the code's key.")
        return _doc(plain), self._sealer.seal(_CONFIRM)


class InviterSession:
    """The inviting computer's side of one try: `on_hello`, `on_identity`, `answer`, `on_confirm`."""

    def __init__(self, invitations: Invitations, now: float) -> None:
        self._invitations = invitations
        self._now = now
        self._invitation: Invitation | None = None
        self._sealer: _Sealer | None = None

    def on_hello(self, frame: dict[str, Any]) -> dict[str, Any]:
        from spake2 import SPAKE2_B

        slot = frame.get("slot")
        if frame.get("t") != "hello" or frame.get("v") != VERSION or not isinstance(slot, int) or isinstance(slot, bool):
            raise PairingBroken("That is not a pairing request this computer understands.")
        invitation = self._invitation = self._invitations.take(slot, self._now)
        theirs = _unb64(frame, "pake")
        spake = SPAKE2_B(invitation.code.secret.encode(), idA=_ID_JOINER, idB=_ID_INVITER)
        ours = spake.start()
        try:
            key = spake.finish(theirs)
        except Exception:  # not a group element: a broken try, counted as a wrong one
            self._invitations.wrong(invitation)
            raise PairingBroken("The joining computer sent a broken pairing message.") from None
        self._sealer = _Sealer(key, _transcript(slot, theirs, ours), joiner=False)
        return {"t": "pake", "pake": _b64(ours)}

    def on_identity(self, frame: dict[str, Any]) -> dict[str, Any]:
        """The joiner's identity; a box that does not open is a wrong try (CodeRefused)."""
        invitation, sealer = self._invitation, self._sealer
        if invitation is None or sealer is None:
            raise PairingBroken("A pairing message came out of turn.")
        plain = sealer.open(frame)
        if plain is None:
            left = self._invitations.wrong(invitation)
            raise CodeRefused("The pairing code is wrong." + (" It is burnt now: make a new one." if left <= 0 else ""))
        if invitation.used:
            raise CodeRefused("That pairing code was used already.")
        return _doc(plain)

    def answer(self, identity: dict[str, Any]) -> dict[str, Any]:
        assert self._sealer is not None  # after on_identity
        return self._sealer.seal(json.dumps(identity).encode())

    def on_confirm(self, frame: dict[str, Any]) -> None:
        """The joiner opened our answer: the code is spent now, and the joiner may be pinned."""
        invitation, sealer = self._invitation, self._sealer
        if invitation is None or sealer is None or sealer.open(frame) != _CONFIRM or invitation.used:
            raise PairingBroken("The joining computer did not confirm the pairing.")
        self._invitations.spend(invitation)
