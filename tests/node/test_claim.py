"""POST /claim over real HTTP: every answer the contract names, and persistence."""

from __future__ import annotations

import signal

from tests.support.node_process import NodeLauncher, new_secret


async def test_claim_with_right_secret_joins_and_returns_an_owner_token(
    nodes: NodeLauncher,
) -> None:
    node = await nodes.start("claim-1")
    reply = await node.claim("family")
    assert reply.status == 200
    nodes.redact(reply.body["owner_token"])
    status = await node.status()
    assert reply.body["cadre"] == "family"
    assert reply.body["peer_id"] == status["peer_id"]
    assert len(reply.body["owner_token"]) >= 32
    assert status["state"] == "joined" and status["cadre"] == "family"


async def test_owner_token_is_stored_only_as_a_hash(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-2")
    token = (await node.claim("family")).body["owner_token"]
    nodes.redact(token)
    for path in node.node_dir.iterdir():
        assert token not in path.read_text(errors="replace")
        assert node.claim_secret is not None and node.claim_secret not in path.read_text(errors="replace")


async def test_wrong_secret_is_403(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-3")
    reply = await node.claim("family", secret=new_secret())
    assert reply.status == 403
    assert reply.error_code == "wrong-secret"
    assert (await node.status())["state"] == "unclaimed"


async def test_rival_cadre_is_409_even_with_the_right_secret(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-4")
    assert (await node.claim("family")).status == 200
    reply = await node.claim("rivals")
    assert reply.status == 409
    assert reply.error_code == "already-claimed"
    assert (await node.status())["cadre"] == "family"


async def test_same_cadre_again_is_200_with_a_new_token(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-5")
    first = await node.claim("family")
    again = await node.claim("Family ")  # a phone keyboard's capital, a stray space
    nodes.redact(first.body["owner_token"], again.body["owner_token"])
    assert again.status == 200
    assert again.body["cadre"] == "family"
    assert again.body["owner_token"] != first.body["owner_token"]
    for token in (first.body["owner_token"], again.body["owner_token"]):
        assert (await node.get("/members", token=token)).status == 200


MALFORMED_CLAIMS = [
    (b"{not json", "malformed JSON"),
    (b"[1, 2]", "not an object"),
    (b'{"cadre": "family"}', "no secret"),
    (b'{"secret": "x", "cadre": 7}', "cadre not a string"),
    (b'{"secret": "x", "cadre": "   "}', "blank cadre"),
    (b'{"secret": "x", "cadre": "' + b"c" * 65 + b'"}', "cadre over 64 chars"),
    (b'{"secret": "x", "cadre": "a\\u0007b"}', "cadre not printable"),
    (b"", "empty body"),
]


async def test_malformed_claim_is_400(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-6")
    for payload, why in MALFORMED_CLAIMS:
        reply = await node.post(
            "/claim", data=payload, headers={"Content-Type": "application/json"}
        )
        assert reply.status == 400, why
        assert reply.error_code in ("invalid-json", "invalid-field"), why
        assert set(reply.body["error"]) == {"code", "message"}, why
    assert (await node.status())["state"] == "unclaimed"


async def test_body_over_4_kib_is_413(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-7")
    big = {"secret": node.claim_secret, "cadre": "family", "padding": "x" * 5000}
    reply = await node.post("/claim", json=big)
    assert reply.status == 413
    assert reply.error_code == "body-too-large"
    assert (await node.status())["state"] == "unclaimed"


async def test_fifty_wrong_secrets_are_throttled_after_the_first_few(
    nodes: NodeLauncher,
) -> None:
    node = await nodes.start("claim-8")
    statuses = [(await node.claim("family", secret=new_secret())).status for _ in range(50)]
    assert statuses[:5] == [403] * 5
    assert statuses[5:] == [429] * 45
    locked = await node.claim("family")  # even the right secret waits out the lock
    assert locked.status == 429
    assert locked.error_code == "too-many-tries"
    assert int(locked.headers["Retry-After"]) >= 1
    assert (await node.status())["state"] == "unclaimed"


async def test_throttle_lifts_after_the_lockout(nodes: NodeLauncher) -> None:
    node = await nodes.start(
        "claim-9",
        extra={"CADRE_CLAIM_MAX_FAILURES": "2", "CADRE_CLAIM_LOCKOUT_MS": "300"},
    )
    assert [(await node.claim("f", secret=new_secret())).status for _ in range(3)] == [
        403,
        403,
        429,
    ]

    async def unlocked() -> bool:
        return (await node.claim("family")).status == 200

    from tests.support.node_process import poll

    await poll(unlocked, deadline_s=5, what="the lockout to end")


async def test_claim_survives_sigkill_and_restart(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-10")
    claimed = await node.claim("family")
    token = claimed.body["owner_token"]
    nodes.redact(token)
    peer_id = claimed.body["peer_id"]
    node.send(signal.SIGKILL)
    assert await node.wait_exit() == -signal.SIGKILL

    status = await node.restart()
    assert status["peer_id"] == peer_id
    assert status["state"] == "joined" and status["cadre"] == "family"
    rival = await node.claim("rivals")
    assert rival.status == 409 and rival.error_code == "already-claimed"
    assert (await node.claim("family")).status == 200
    assert (await node.get("/members", token=token)).status == 200


async def test_invited_node_cannot_be_claimed(nodes: NodeLauncher) -> None:
    from cadre_desktop.node.cadre.invitation_code import InvitationCode
    from tests.support.node_process import free_port

    code = InvitationCode("127.0.0.1", free_port(), "abcdefgh12", "s" * 32, "cn1x").encode()
    node = await nodes.start("claim-11", invitation=code)
    reply = await node.claim("family", secret=new_secret())
    assert reply.status == 409
    assert reply.error_code == "not-claimable"


async def test_unknown_route_and_method_answer_json_errors(nodes: NodeLauncher) -> None:
    node = await nodes.start("claim-12")
    missing = await node.get("/nowhere")
    assert missing.status == 404 and missing.error_code == "not-found"
    wrong = await node.request("DELETE", "/claim")
    assert wrong.status == 405 and wrong.error_code == "method-not-allowed"
