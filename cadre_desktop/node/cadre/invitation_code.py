"""The invitation string, and the proof a joining node sends with it.

Format: ``cadre-inv1.`` followed by the unpadded base64url encoding of a compact
JSON object::

    {"host": "192.168.1.20", "port": 47001, "id": "<invitation id>",
     "secret": "<random secret>", "peer": "<inviting node's peer id>"}

``host`` and ``port`` are where the inviting node's API answers (its advertise host
and API port), ``id`` names the invitation there, and ``secret`` proves it (the
inviting node stores only its SHA-256). ``peer`` lets the joining node say which node
it expected. The whole string is a secret: whoever holds it can join the cadre once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from cadre_desktop.errors import InputError
from cadre_desktop.text import clean as clean_text
from cadre_desktop.wire.keys import b64url, b64url_decode

PREFIX = "cadre-inv1."
MAX_CHARS = 2048
_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,128}")
_HOST = re.compile(r"[A-Za-z0-9.:-]{1,253}")
JOIN_PROOF_LABEL = b"cadre-join-v1"


class MalformedInvitation(InputError):
    """The string is not an invitation. The message never quotes the string."""

    code = "malformed_invitation"


@dataclass(frozen=True)
class InvitationCode:
    host: str
    port: int
    id: str
    secret: str
    peer: str

    def encode(self) -> str:
        doc = {
            "host": self.host,
            "port": self.port,
            "id": self.id,
            "secret": self.secret,
            "peer": self.peer,
        }
        return PREFIX + b64url(json.dumps(doc, separators=(",", ":")).encode())

    def __repr__(self) -> str:  # the secret must never reach a log
        return f"InvitationCode(host={self.host!r}, port={self.port}, id={self.id!r})"


def parse_invitation(text: str) -> InvitationCode:
    """Decode an invitation string; raises :class:`MalformedInvitation`."""
    text = text.strip()
    if len(text) > MAX_CHARS:
        raise MalformedInvitation("it is too long")
    if not text.startswith(PREFIX):
        raise MalformedInvitation(f"it does not start with {PREFIX!r}")
    try:
        doc = json.loads(b64url_decode(text[len(PREFIX) :]))
    except (ValueError, UnicodeDecodeError):
        raise MalformedInvitation("its body is not base64url-encoded JSON") from None
    if not isinstance(doc, dict):
        raise MalformedInvitation("its body is not a JSON object")
    host, port = doc.get("host"), doc.get("port")
    ident, secret, peer = doc.get("id"), doc.get("secret"), doc.get("peer")
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise MalformedInvitation("it has no valid host")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise MalformedInvitation("it has no valid port")
    if not isinstance(ident, str) or not _TOKEN.fullmatch(ident):
        raise MalformedInvitation("it has no valid invitation id")
    if not isinstance(secret, str) or not _TOKEN.fullmatch(secret) or len(secret) < 16:
        raise MalformedInvitation("it has no valid secret")
    if not isinstance(peer, str) or clean_text(peer, 128) is None:
        raise MalformedInvitation("it has no valid inviting peer id")
    return InvitationCode(host=host, port=port, id=ident, secret=secret, peer=peer)


def join_proof_message(invitation_id: str, joiner_peer_id: str, inviter_peer_id: str) -> bytes:
    """What a joining node signs: binds its key to this invitation at this inviter."""
    parts = (JOIN_PROOF_LABEL, invitation_id.encode(), joiner_peer_id.encode(),
             inviter_peer_id.encode())
    return b"\n".join(parts)
