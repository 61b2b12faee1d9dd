"""The node's decisions in-process, on a fake clock: claim, invitations, storage."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cadre_desktop.node.cadre import invitations
from cadre_desktop.node.cadre.invitation_code import join_proof_message, parse_invitation
from cadre_desktop.node.errors import StorageError
from cadre_desktop.node.identity import load_or_create_identity, peer_id_for
from cadre_desktop.node.node import Node, Phase
from cadre_desktop.wire.http_status import answer_to
from cadre_desktop.wire.refusal import RequestRefused
from tests.support.clock import FakeClock
from tests.support.node_rig import SECRET, make_node


def join(node: Node, invitation: str, key: Ed25519PrivateKey) -> dict:
    code = parse_invitation(invitation)
    public = key.public_key().public_bytes_raw()
    peer_id = peer_id_for(public)
    return invitations.admit(
        node,
        "10.0.0.9",
        invitation_id=code.id,
        secret=code.secret,
        peer_id=peer_id,
        public_key=public,
        signature=key.sign(join_proof_message(code.id, peer_id, node.peer_id)),
    )


def test_invitation_expires_exactly_at_its_ttl(tmp_path: Path) -> None:
    clock = FakeClock()
    node = make_node(tmp_path, clock)
    node.claim("127.0.0.1", SECRET, "family")
    minted = invitations.mint_invitation(node, ttl_s=60)
    code = parse_invitation(minted["invitation"])
    assert (code.host, code.port, code.peer) == ("10.0.0.5", 41001, node.peer_id)

    clock.advance(59.9)
    assert join(node, minted["invitation"], Ed25519PrivateKey.generate())["cadre"] == "family"

    late = invitations.mint_invitation(node, ttl_s=60)
    clock.advance(60)
    with pytest.raises(RequestRefused) as refused:
        join(node, late["invitation"], Ed25519PrivateKey.generate())
    answer = answer_to(refused.value)
    assert (answer.status, answer.code) == (410, "invitation-expired")
    rows = invitations.list_invitations(node)["invitations"]
    assert [row["status"] for row in rows] == ["used", "expired"]


def test_expired_invitations_are_forgotten_a_week_later(tmp_path: Path) -> None:
    clock = FakeClock()
    node = make_node(tmp_path, clock)
    node.claim("127.0.0.1", SECRET, "family")
    invitations.mint_invitation(node, ttl_s=1)
    clock.advance(invitations.FORGET_AFTER_S + 2)
    invitations.mint_invitation(node, ttl_s=1)
    assert len(node.store.state.invitations) == 1


def test_state_is_unchanged_when_saving_fails(tmp_path: Path, monkeypatch) -> None:
    node = make_node(tmp_path, FakeClock())

    def refuse(*_args, **_kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cadre_desktop.node.state.write_bytes_atomic", refuse)
    with pytest.raises(StorageError):
        node.claim("127.0.0.1", SECRET, "family")
    assert node.phase is Phase.UNCLAIMED
    assert node.store.state.owner_token_sha256 == []


def test_state_file_round_trips_and_holds_no_token(tmp_path: Path) -> None:
    clock = FakeClock()
    node = make_node(tmp_path, clock)
    token = node.claim("127.0.0.1", SECRET, "family")["owner_token"]
    text = node.store.path.read_text()
    assert token not in text and SECRET not in text
    assert json.loads(text)["version"] == 1
    again = make_node(tmp_path, clock)
    assert again.phase is Phase.JOINED and again.cadre == "family"
    again.authorize_owner(token)
    leftovers = [p.name for p in node.store.path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_owner_tokens_beyond_the_last_eight_stop_working(tmp_path: Path) -> None:
    node = make_node(tmp_path, FakeClock())
    tokens = [node.claim("127.0.0.1", SECRET, "family")["owner_token"] for _ in range(9)]
    with pytest.raises(RequestRefused):
        node.authorize_owner(tokens[0])
    node.authorize_owner(tokens[-1])


def test_identity_file_is_created_once_and_reused(tmp_path: Path) -> None:
    first = load_or_create_identity(tmp_path)
    assert load_or_create_identity(tmp_path) == first
    assert oct(os.stat(tmp_path / "identity.json").st_mode & 0o777) == "0o600"
    message = b"hello"
    signature = first.sign(message)
    from cadre_desktop.wire.keys import verify_signature

    assert verify_signature(first.public_key, signature, message)
    assert not verify_signature(first.public_key, signature, b"other")


def test_config_repr_never_shows_secrets(tmp_path: Path) -> None:
    node = make_node(tmp_path, FakeClock())
    assert SECRET not in repr(node.config) and SECRET not in str(node.config)
