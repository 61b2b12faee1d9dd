"""The joining side of an invitation: redeem it at the inviting node.

Runs as a background task once the API is already answering, so ``/status`` reports
``joining`` meanwhile. A refusal from the inviting node (unknown, used, expired...)
is final: the node reports ``failed`` with the reason and stays up. Anything that
might pass (no route yet, connection refused, a timeout, a 5xx or 429) is retried
with a growing pause until ``CADRE_JOIN_TIMEOUT_MS`` has passed in all.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from cadre_desktop.errors import CadreError
from cadre_desktop.node.cadre.client import ClientError, post_json
from cadre_desktop.node.cadre.invitation_code import MalformedInvitation, join_proof_message, parse_invitation
from cadre_desktop.node.node import Node
from cadre_desktop.text import clean as clean_text
from cadre_desktop.wire.keys import b64url

log = logging.getLogger("cadre.node.joiner")

ATTEMPT_TIMEOUT_S = 5.0
MAX_CADRE_CHARS = 64
FIRST_PAUSE_S = 0.1
MAX_PAUSE_S = 2.0

REFUSALS = {
    "invitation-used": "the invitation was already used by another node",
    "invitation-expired": "the invitation has expired",
    "invitation-unknown": "the inviting node does not know this invitation",
    "invitation-invalid": "the inviting node did not accept the invitation's secret",
    "not-in-cadre": "the inviting node is not in a cadre any more",
    "invalid-proof": "the inviting node did not accept this node's key proof",
}


async def redeem_invitation(node: Node, text: str, timeout_s: float) -> None:
    """Redeem ``text`` for ``node``; ends with the node joined or failed."""
    try:
        code = parse_invitation(text)
    except MalformedInvitation as err:
        node.join_failed(f"the invitation is malformed: {err}")
        return
    try:
        signature = node.identity.sign(join_proof_message(code.id, node.peer_id, code.peer))
    except CadreError as err:
        node.join_failed(str(err))
        return
    body = {
        "invitation_id": code.id,
        "secret": code.secret,
        "peer_id": node.peer_id,
        "public_key": b64url(node.identity.public_key),
        "signature": b64url(signature),
    }
    where = f"{code.host}:{code.port}"
    log.info("redeeming invitation %s at %s", code.id, where)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    pause = FIRST_PAUSE_S
    last_problem = "no attempt finished"
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            node.join_failed(
                f"could not redeem the invitation at {where} within "
                f"{timeout_s:g} s: {last_problem}"
            )
            return
        try:
            async with asyncio.timeout(min(ATTEMPT_TIMEOUT_S, remaining)):
                status, headers, raw = await post_json(code.host, code.port, "/join", body)
        except (OSError, ClientError, TimeoutError) as err:
            last_problem = f"the inviting node did not answer ({type(err).__name__})"
        else:
            payload = _json_or_none(raw)
            if status == 200:
                _accept(node, code.peer, where, payload)
                return
            if status != 429 and status < 500:
                node.join_failed(_refusal(status, payload))
                return
            last_problem = f"the inviting node answered {status}"
            retry_after = headers.get("retry-after", "")
            if retry_after.isdigit():
                pause = max(pause, float(retry_after))
        log.info("invitation not redeemed yet (%s); retrying", last_problem)
        await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
        pause = min(pause * 2, MAX_PAUSE_S)


def _accept(node: Node, expected_inviter: str, where: str, payload: Any) -> None:
    cadre = payload.get("cadre") if isinstance(payload, dict) else None
    inviter = payload.get("inviter") if isinstance(payload, dict) else None
    if cadre is None:
        node.join_failed(f"the inviting node at {where} gave an answer without a cadre")
        return
    # The inviter's answer is hostile until checked: the name reaches our state,
    # /status, the host's records and the user's terminal.
    if clean_text(cadre, MAX_CADRE_CHARS) is None:
        node.join_failed(
            f"the inviting node at {where} gave a cadre name that is not 1 to {MAX_CADRE_CHARS} "
            "printable characters on one line"
        )
        return
    if inviter != expected_inviter:
        node.join_failed(
            f"the node at {where} is not the node that made this invitation"
        )
        return
    try:
        node.join_succeeded(cadre, inviter)
    except CadreError as err:
        node.join_failed(f"joined, but could not save it: {err}")


def _refusal(status: int, payload: Any) -> str:
    error = payload.get("error") if isinstance(payload, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and code in REFUSALS:
        return f"invitation refused: {REFUSALS[code]} ({code})"
    return f"invitation refused: the inviting node answered {status}"


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
