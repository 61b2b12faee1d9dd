"""Invitations between real nodes: mint, redeem, reuse, expiry, members."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cadre_desktop.node.cadre.invitation_code import join_proof_message, parse_invitation
from cadre_desktop.node.identity import peer_id_for
from cadre_desktop.wire.keys import b64url
from tests.support.node_process import NodeLauncher, NodeProcess, poll


async def claimed_node(nodes: NodeLauncher, node_id: str = "inviter") -> tuple[NodeProcess, str]:
    node = await nodes.start(node_id)
    reply = await node.claim("family")
    assert reply.status == 200
    token = reply.body["owner_token"]
    nodes.redact(token)
    return node, token


async def mint(nodes: NodeLauncher, node: NodeProcess, token: str, **body: Any) -> dict[str, Any]:
    reply = await node.post("/invitations", token=token, json=body or None)
    assert reply.status == 201, reply.body
    invitation = reply.body["invitation"]
    nodes.redact(invitation, parse_invitation(invitation).secret)
    return reply.body


def proof(invitation: str, inviter_peer: str, key: Ed25519PrivateKey | None = None) -> dict[str, str]:
    """A POST /join body as a joining node would send it, signed with ``key``."""
    code = parse_invitation(invitation)
    key = key or Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes_raw()
    peer_id = peer_id_for(public)
    signature = key.sign(join_proof_message(code.id, peer_id, inviter_peer))
    return {
        "invitation_id": code.id,
        "secret": code.secret,
        "peer_id": peer_id,
        "public_key": b64url(public),
        "signature": b64url(signature),
    }


async def test_invitation_is_redeemed_and_the_joiner_reports_joined(nodes: NodeLauncher) -> None:
    inviter, token = await claimed_node(nodes)
    minted = await mint(nodes, inviter, token)
    assert minted["invitation"].startswith("cadre-inv1.")
    assert minted["expires_at"].endswith("Z")

    joiner = await nodes.start("joiner", invitation=minted["invitation"])
    joined = await joiner.wait_state("joined")
    assert joined["cadre"] == "family" and joined["error"] is None

    members = await inviter.get("/members", token=token)
    assert members.status == 200
    assert members.body["cadre"] == "family"
    peers = {m["peer_id"]: m for m in members.body["members"]}
    assert set(peers) == {(await inviter.status())["peer_id"], joined["peer_id"]}
    assert peers[joined["peer_id"]]["via"] == "invitation"
    assert peers[joined["peer_id"]]["joined_at"].endswith("Z")


async def test_reused_invitation_fails_with_a_reason_and_the_node_stays_up(
    nodes: NodeLauncher,
) -> None:
    inviter, token = await claimed_node(nodes)
    invitation = (await mint(nodes, inviter, token))["invitation"]
    first = await nodes.start("joiner-1", invitation=invitation)
    await first.wait_state("joined")

    second = await nodes.start("joiner-2", invitation=invitation)
    failed = await second.wait_state("failed")
    assert "already used" in failed["error"]
    assert failed["cadre"] is None
    assert second.running


@pytest.mark.slow
async def test_expired_invitation_is_rejected(nodes: NodeLauncher) -> None:
    inviter, token = await claimed_node(nodes)
    minted = await mint(nodes, inviter, token, ttl_s=1)

    async def expired() -> bool:
        listing = await inviter.get("/invitations", token=token)
        rows = {row["id"]: row for row in listing.body["invitations"]}
        return rows[minted["id"]]["status"] == "expired"

    await poll(expired, deadline_s=5, what="the invitation to expire")
    joiner = await nodes.start("joiner", invitation=minted["invitation"])
    failed = await joiner.wait_state("failed")
    assert "expired" in failed["error"]


async def test_joined_node_does_not_redeem_again_after_a_restart(nodes: NodeLauncher) -> None:
    inviter, token = await claimed_node(nodes)
    invitation = (await mint(nodes, inviter, token))["invitation"]
    joiner = await nodes.start("joiner", invitation=invitation)
    peer_id = (await joiner.wait_state("joined"))["peer_id"]
    assert await joiner.stop() == 0
    assert await inviter.stop() == 0  # nobody to redeem against any more

    status = await joiner.restart()
    assert status["state"] == "joined"
    assert status["cadre"] == "family" and status["peer_id"] == peer_id


async def test_malformed_invitation_fails_and_stays_up(nodes: NodeLauncher) -> None:
    node = await nodes.start("joiner", invitation="cadre-inv1.bm90IGpzb24")
    failed = await node.wait_state("failed")
    assert "malformed" in failed["error"]
    assert node.running


async def test_minting_needs_the_owner_token(nodes: NodeLauncher) -> None:
    inviter, token = await claimed_node(nodes)
    missing = await inviter.post("/invitations")
    assert missing.status == 401 and missing.error_code == "unauthorized"
    wrong = await inviter.post("/invitations", token="not-the-token-" + "x" * 30)
    assert wrong.status == 403 and wrong.error_code == "forbidden"
    assert (await inviter.get("/members")).status == 401
    assert (await inviter.get("/members", token="nope" * 10)).status == 403


async def test_unclaimed_node_mints_nothing(nodes: NodeLauncher) -> None:
    node = await nodes.start("lonely")
    reply = await node.post("/invitations", token="x" * 43)
    assert reply.status == 403


async def test_ttl_out_of_bounds_is_400(nodes: NodeLauncher) -> None:
    inviter, token = await claimed_node(nodes)
    for ttl in (0, -5, 10**9, "soon", 1.5, True, None):
        reply = await inviter.post("/invitations", token=token, json={"ttl_s": ttl})
        assert (reply.status, reply.error_code) == (400, "invalid-field"), ttl
    reply = await inviter.post("/invitations", token=token, data=b"{", headers={})
    assert (reply.status, reply.error_code) == (400, "invalid-json")


async def test_join_is_idempotent_for_the_same_peer_and_one_time_for_others(
    nodes: NodeLauncher,
) -> None:
    inviter, token = await claimed_node(nodes)
    invitation = (await mint(nodes, inviter, token))["invitation"]
    inviter_peer = (await inviter.status())["peer_id"]
    key = Ed25519PrivateKey.generate()
    body = proof(invitation, inviter_peer, key)

    first = await inviter.post("/join", json=body)
    retry = await inviter.post("/join", json=body)  # as if the first answer was lost
    assert first.status == retry.status == 200
    assert first.body["cadre"] == "family" and first.body["inviter"] == inviter_peer

    other = await inviter.post("/join", json=proof(invitation, inviter_peer))
    assert other.status == 409 and other.error_code == "invitation-used"


async def test_join_refuses_bad_proofs_and_secrets(nodes: NodeLauncher) -> None:
    inviter, token = await claimed_node(nodes)
    invitation = (await mint(nodes, inviter, token))["invitation"]
    inviter_peer = (await inviter.status())["peer_id"]

    forged = proof(invitation, inviter_peer)
    forged["peer_id"] = inviter_peer[:-1] + ("a" if inviter_peer[-1] != "a" else "b")
    assert (await inviter.post("/join", json=forged)).error_code == "invalid-proof"

    wrong_secret = proof(invitation, inviter_peer) | {"secret": "w" * 43}
    reply = await inviter.post("/join", json=wrong_secret)
    assert reply.status == 403 and reply.error_code == "invitation-invalid"

    unknown = proof(invitation, inviter_peer) | {"invitation_id": "nosuchinvite"}
    reply = await inviter.post("/join", json=unknown)
    assert reply.status == 404 and reply.error_code == "invitation-unknown"

    listing = await inviter.get("/invitations", token=token)
    assert [row["status"] for row in listing.body["invitations"]] == ["pending"]


async def test_used_invitation_is_remembered_across_an_inviter_restart(
    nodes: NodeLauncher,
) -> None:
    inviter, token = await claimed_node(nodes)
    invitation = (await mint(nodes, inviter, token))["invitation"]
    await (await nodes.start("joiner-1", invitation=invitation)).wait_state("joined")
    assert await inviter.stop() == 0
    await inviter.restart()

    late = await nodes.start("joiner-2", invitation=invitation)
    assert "already used" in (await late.wait_state("failed"))["error"]
