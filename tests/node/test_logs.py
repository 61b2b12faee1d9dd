"""Logs are plain lines and never carry a secret, a token or an invitation."""

from __future__ import annotations

from cadre_desktop.node.cadre.invitation_code import parse_invitation
from tests.support.node_process import NodeLauncher, new_secret


async def test_no_secret_in_any_log_line_through_a_whole_flow(nodes: NodeLauncher) -> None:
    inviter = await nodes.start("log-inviter")
    await inviter.claim("family", secret=new_secret())
    claimed = await inviter.claim("family")
    token = claimed.body["owner_token"]
    minted = await inviter.post("/invitations", token=token)
    invitation = minted.body["invitation"]
    joiner = await nodes.start("log-joiner", invitation=invitation)
    await joiner.wait_state("joined")
    await inviter.get("/members", token=token)
    await inviter.post("/invitations", token="wrong-" + token)
    assert await joiner.stop() == 0
    assert await inviter.stop() == 0

    logs = inviter.logs() + joiner.logs()
    assert '"POST /claim" 200' in logs and '"POST /join" 200' in logs  # logs were captured
    assert inviter.claim_secret is not None
    for secret in (
        inviter.claim_secret,
        token,
        invitation,
        parse_invitation(invitation).secret,
    ):
        assert secret not in logs
    assert "Authorization" not in logs and "Bearer" not in logs


async def test_a_secret_pasted_into_a_url_is_scrubbed_from_the_access_log(
    nodes: NodeLauncher,
) -> None:
    node = await nodes.start("log-paste")
    reply = await node.get(f"/claim?node=log-paste&oops={node.claim_secret}")
    assert reply.status == 200
    assert await node.stop() == 0
    logs = node.logs()
    assert "oops=[redacted]" in logs
    assert node.claim_secret is not None and node.claim_secret not in logs


async def test_the_probes_status_requests_leave_no_access_line_but_other_requests_do(
    nodes: NodeLauncher,
) -> None:
    """Regression: every probe's `GET /status` (every few seconds, every node) wrote an access line."""
    node = await nodes.start("log-quiet")
    for _ in range(5):
        assert (await node.get("/status")).status == 200
    assert (await node.get("/claim?node=log-quiet")).status == 200
    assert (await node.get("/no-such-page")).status == 404
    assert await node.stop() == 0
    logs = node.logs()
    assert '"GET /claim?node=log-quiet" 200' in logs and '"GET /no-such-page" 404' in logs
    assert '"GET /status"' not in logs
