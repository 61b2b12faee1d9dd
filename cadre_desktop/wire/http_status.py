"""The HTTP status of each refusal of the node's API, at its edge (node/api.py's `Api.answer`,
and `host/lend_wire.errors_as_json` for the lend API, which speaks the node's words).

The node's logic (node.py, invitations.py, donated.py) refuses a request with a
`RequestRefused` naming its reason in snake_case; here alone that reason becomes the
answer the node contract writes (docs/node-contract.md): a status, the reason in
kebab-case, and the headers it needs.
"""

from __future__ import annotations

from cadre_desktop.errors import ApiError, wire_code
from cadre_desktop.wire.refusal import RequestRefused

#: The status of each refusal, by its code.
REFUSAL_STATUSES = {
    "unauthorized": 401,
    "forbidden": 403,
    "too_many_tries": 429,
    # claims
    "wrong_secret": 403,
    "already_claimed": 409,
    "not_claimable": 409,
    # invitations
    "not_in_cadre": 409,
    "too_many_invitations": 409,
    "invitation_unknown": 404,
    "invitation_invalid": 403,
    "invalid_proof": 400,
    "invitation_used": 409,
    "invitation_expired": 410,
    # seeds
    "not_donated": 409,
    "wrong_token": 403,
    "invalid_seed": 400,
    "seed_mismatch": 400,
    "untrusted_key": 403,
    "bad_signature": 403,
    "already_seeded": 409,
}


def answer_to(refusal: RequestRefused) -> ApiError:
    """The answer the node's API gives for `refusal`."""
    status = REFUSAL_STATUSES[refusal.code]
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if refusal.retry_after_s is not None:
        headers["Retry-After"] = str(refusal.retry_after_s)
    return ApiError(status, wire_code(refusal.code), refusal.message, headers=headers)
