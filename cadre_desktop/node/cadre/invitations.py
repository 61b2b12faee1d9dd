"""The inviting side of invitations: mint, list, and admit a joining node.

An invitation is one-time and expires. The inviting node keeps only its id, the
SHA-256 of its secret, its times and who used it, in the state file, so a respawn
does not forget which invitations were used. Redeeming is idempotent for the node
that used it: if the answer to a successful ``POST /join`` is lost and the joining
node retries, it gets the same success rather than "already used".
"""

from __future__ import annotations

import hmac
import logging
import secrets
from typing import Any

from cadre_desktop.node.cadre.invitation_code import InvitationCode, join_proof_message
from cadre_desktop.node.identity import peer_id_for
from cadre_desktop.node.node import Node, sha256_hex
from cadre_desktop.node.state import Invitation, Member, NodeState
from cadre_desktop.wire.keys import verify_signature
from cadre_desktop.wire.refusal import RequestRefused

log = logging.getLogger("cadre.node.invitations")

DEFAULT_TTL_S = 24 * 3600
MAX_TTL_S = 30 * 24 * 3600
MAX_PENDING = 100
FORGET_AFTER_S = 7 * 24 * 3600  # an expired invitation is dropped a week later


def mint_invitation(node: Node, ttl_s: int = DEFAULT_TTL_S) -> dict[str, Any]:
    """Create a one-time invitation into this node's cadre, valid ``ttl_s`` seconds.

    The caller has already checked the owner token.
    """
    membership = node.store.state.membership
    if membership is None:
        raise RequestRefused("this node is not in a cadre yet", code="not_in_cadre")
    now = node.clock.wall()
    pending = [
        inv
        for inv in node.store.state.invitations
        if inv.used_by is None and inv.expires_at > now
    ]
    if len(pending) >= MAX_PENDING:
        raise RequestRefused(
            f"{MAX_PENDING} invitations are still open; wait until some are used or expire",
            code="too_many_invitations",
        )
    secret = secrets.token_urlsafe(32)
    invitation = Invitation(
        id=secrets.token_urlsafe(12),
        secret_sha256=sha256_hex(secret),
        created_at=now,
        expires_at=now + ttl_s,
    )

    def change(state: NodeState) -> None:
        state.invitations = [
            inv for inv in state.invitations if inv.expires_at + FORGET_AFTER_S > now
        ]
        state.invitations.append(invitation)

    node.store.update(change)
    code = InvitationCode(
        host=node.config.advertise_host,
        port=node.config.api_port,
        id=invitation.id,
        secret=secret,
        peer=node.peer_id,
    )
    log.info("invitation %s minted, expires %s", invitation.id, node.iso(invitation.expires_at))
    return {
        "invitation": code.encode(),
        "id": invitation.id,
        "expires_at": node.iso(invitation.expires_at),
    }


def list_invitations(node: Node) -> dict[str, Any]:
    """Every remembered invitation and whether it is pending, used or expired."""
    now = node.clock.wall()
    rows = []
    for inv in node.store.state.invitations:
        if inv.used_by is not None:
            status = "used"
        elif inv.expires_at <= now:
            status = "expired"
        else:
            status = "pending"
        rows.append(
            {
                "id": inv.id,
                "status": status,
                "created_at": node.iso(inv.created_at),
                "expires_at": node.iso(inv.expires_at),
                "used_by": inv.used_by,
                "used_at": None if inv.used_at is None else node.iso(inv.used_at),
            }
        )
    return {"invitations": rows}


def list_members(node: Node) -> dict[str, Any]:
    return {
        "cadre": node.cadre,
        "members": [
            {"peer_id": m.peer_id, "joined_at": node.iso(m.joined_at), "via": m.via}
            for m in node.store.state.members
        ],
    }


def admit(
    node: Node,
    client: str,
    *,
    invitation_id: str,
    secret: str,
    peer_id: str,
    public_key: bytes,
    signature: bytes,
) -> dict[str, Any]:
    """Redeem an invitation for the node ``peer_id`` (the body of ``POST /join``).

    The joining node proves it holds the key behind ``peer_id`` by signing
    :func:`join_proof_message`, so a member listed here is a real key holder.
    """
    node.check_throttle(node.join_limiter, client)
    membership = node.store.state.membership
    if membership is None:
        raise RequestRefused("the inviting node is not in a cadre", code="not_in_cadre")
    invitation = next(
        (inv for inv in node.store.state.invitations if inv.id == invitation_id), None
    )
    if invitation is None:
        node.join_limiter.failed(client)
        raise RequestRefused("this node does not know that invitation", code="invitation_unknown")
    if not hmac.compare_digest(sha256_hex(secret), invitation.secret_sha256):
        node.join_limiter.failed(client)
        raise RequestRefused("the invitation's secret is wrong", code="invitation_invalid")
    if peer_id_for(public_key) != peer_id or not verify_signature(
        public_key, signature, join_proof_message(invitation_id, peer_id, node.peer_id)
    ):
        raise RequestRefused("the joining node's key proof does not check out", code="invalid_proof")
    if peer_id == node.peer_id:
        raise RequestRefused("a node cannot join by its own invitation", code="invalid_proof")
    answer = {"cadre": membership.cadre, "inviter": node.peer_id}
    if invitation.used_by is not None:
        if invitation.used_by == peer_id:  # a retry after a lost answer
            return answer | {"joined_at": node.iso(invitation.used_at or invitation.created_at)}
        raise RequestRefused("the invitation was already used by another node", code="invitation_used")
    now = node.clock.wall()
    if now >= invitation.expires_at:
        raise RequestRefused("the invitation has expired", code="invitation_expired")

    def change(state: NodeState) -> None:
        for inv in state.invitations:
            if inv.id == invitation_id:
                inv.used_by, inv.used_at = peer_id, now
        if all(m.peer_id != peer_id for m in state.members):
            state.members.append(Member(peer_id=peer_id, joined_at=now, via="invitation"))

    node.store.update(change)
    log.info("invitation %s redeemed by %s", invitation_id, peer_id)
    return answer | {"joined_at": node.iso(now)}
