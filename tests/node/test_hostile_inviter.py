"""An inviting node is anyone on the network: what it answers is checked before it is kept."""

from __future__ import annotations

import pytest
from aiohttp import web

from cadre_desktop.node.invitation_code import InvitationCode
from tests.node.conftest import NodeLauncher


@pytest.fixture
def fake_inviter(serve_handler):
    async def serve(answer: dict) -> int:
        async def join(request):
            return web.json_response(answer)
        return await serve_handler("POST", "/join", join)
    return serve


@pytest.mark.parametrize("cadre", ["\x1b]0;pwned\x07", "fam\x1b[2J", "two\nlines", "bell\x07", "x" * 65, ""])
async def test_a_cadre_name_that_is_not_clean_text_fails_the_join_and_is_never_kept(
        nodes: NodeLauncher, fake_inviter, cadre: str) -> None:
    peer = "cn1inviterpeer"
    port = await fake_inviter({"cadre": cadre, "inviter": peer})
    invitation = InvitationCode("127.0.0.1", port, "invitation-id-1", "s" * 32, peer).encode()
    node = await nodes.start("joiner", invitation=invitation)
    failed = await node.wait_state("failed")
    assert "cadre name" in failed["error"] or "without a cadre" in failed["error"]
    assert failed["cadre"] is None
    assert failed["error"].isprintable()
    assert node.running


async def test_an_invitation_naming_an_unprintable_inviter_is_malformed(nodes: NodeLauncher) -> None:
    invitation = InvitationCode("127.0.0.1", 9, "invitation-id-1", "s" * 32, "peer\x1b[2J").encode()
    node = await nodes.start("joiner", invitation=invitation)
    failed = await node.wait_state("failed")
    assert "malformed" in failed["error"]
