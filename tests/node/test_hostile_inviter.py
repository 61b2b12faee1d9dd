"""An inviting node is anyone on the network: what it answers is checked before it is kept."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from cadre_desktop.node.cadre.client import ClientError, post_json
from cadre_desktop.node.cadre.invitation_code import InvitationCode
from tests.support.node_process import NodeLauncher


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


# -- the join request's own client (cadre_desktop/node/cadre/client.py) against raw answers ------------------

@pytest.fixture
async def raw_inviter():
    """A TCP server that reads a request's head and answers the given bytes, then closes."""
    servers = []

    async def serve(answer: bytes) -> int:
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return server.sockets[0].getsockname()[1]

    yield serve
    for server in servers:
        server.close()


async def test_the_join_client_reads_a_bounded_json_answer(raw_inviter) -> None:
    body = b'{"cadre": "family"}'
    port = await raw_inviter(b"HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    status, headers, answer = await post_json("127.0.0.1", port, "/join", {"a": 1})
    assert (status, headers["retry-after"], answer) == (429, "3", body)


@pytest.mark.parametrize("answer", [
    b"HELLO\r\n\r\n",  # not HTTP
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # closed before the whole body
    b"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + b"x" * 70000,  # over the client's limit
    b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",  # a head without end
    b"",  # closed without a word
])
async def test_the_join_client_refuses_an_answer_that_is_not_bounded_http(raw_inviter, answer: bytes) -> None:
    port = await raw_inviter(answer)
    with pytest.raises(ClientError):
        await post_json("127.0.0.1", port, "/join", {"a": 1})


async def test_an_inviter_that_answers_junk_is_retried_until_the_join_times_out(
        nodes: NodeLauncher, raw_inviter) -> None:
    port = await raw_inviter(b"HELLO\r\n\r\n")
    invitation = InvitationCode("127.0.0.1", port, "invitation-id-1", "s" * 32, "cn1inviterpeer").encode()
    node = await nodes.start("joiner", invitation=invitation, extra={"CADRE_JOIN_TIMEOUT_MS": "600"})
    failed = await node.wait_state("failed")
    assert "could not redeem the invitation" in failed["error"] and "ClientError" in failed["error"]
    assert node.running
