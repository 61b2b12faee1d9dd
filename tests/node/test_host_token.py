"""The host's own credential (CADRE_HOST_TOKEN) and the node's name (CADRE_NODE_NAME).

The host token lets the host that runs a node mint invitations into its cadre, with
no owner token to copy from a phone, and only over loopback: from any other address
it is an unknown token. It never appears in a file or in the node's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadre_desktop.wire.http_status import answer_to
from cadre_desktop.wire.refusal import RequestRefused
from tests.support.clock import FakeClock
from tests.support.node_process import NodeLauncher, new_secret
from tests.support.node_rig import SECRET, make_node

HOST_TOKEN = "host-only-" + "x" * 32


def test_the_host_token_counts_only_from_this_machine(tmp_path: Path) -> None:
    node = make_node(tmp_path, FakeClock(), CADRE_HOST_TOKEN=HOST_TOKEN)
    node.claim("10.0.0.9", SECRET, "family")
    remote: str | None
    for remote in ("127.0.0.1", "::1", "127.8.9.10"):
        node.authorize_owner(HOST_TOKEN, remote)
    for remote in ("10.0.0.9", "192.168.1.20", "fe80::1", None, "garbage"):
        with pytest.raises(RequestRefused) as refused:
            node.authorize_owner(HOST_TOKEN, remote)
        answer = answer_to(refused.value)
        assert answer.status == 403 and answer.code == "forbidden"


def test_without_a_host_token_nothing_changes(tmp_path: Path) -> None:
    node = make_node(tmp_path, FakeClock())
    node.claim("10.0.0.9", SECRET, "family")
    with pytest.raises(RequestRefused):
        node.authorize_owner(HOST_TOKEN, "127.0.0.1")


async def test_the_host_mints_an_invitation_that_a_new_node_redeems(nodes: NodeLauncher) -> None:
    token = new_secret()
    nodes.redact(token)
    inviter = await nodes.start("inviter", extra={"CADRE_HOST_TOKEN": token})
    assert (await inviter.claim("family")).status == 200
    minted = await inviter.post("/invitations", token=token)
    assert minted.status == 201, minted.body
    invitation = minted.body["invitation"]
    nodes.redact(invitation)

    joiner = await nodes.start("joiner", invitation=invitation)
    joined = await joiner.wait_state("joined")
    assert joined["cadre"] == "family"
    members = await inviter.get("/members", token=token)
    assert joiner.node_id and len(members.body["members"]) == 2
    state_files = "".join(p.read_text() for p in inviter.node_dir.glob("*.json"))
    assert token not in state_files  # not even as the owner tokens' digests


def test_a_bad_host_token_or_name_exits_2_without_echoing_it(nodes: NodeLauncher) -> None:
    short = "short token"
    result = nodes.run_to_exit(nodes.env_for("cfg", extra={"CADRE_HOST_TOKEN": short}))
    assert result.returncode == 2 and "CADRE_HOST_TOKEN" in result.stderr and short not in result.stderr
    result = nodes.run_to_exit(nodes.env_for("cfg", extra={"CADRE_NODE_NAME": "x" * 65}))
    assert result.returncode == 2 and "CADRE_NODE_NAME" in result.stderr


async def test_the_claim_page_names_the_node(nodes: NodeLauncher) -> None:
    named = await nodes.start("page-name", extra={"CADRE_NODE_NAME": "Kitchen <3"})
    page = (await named.get("/claim?node=page-name")).body
    assert "<title>Claim Kitchen &lt;3</title>" in page and "<strong>Kitchen &lt;3</strong>" in page
    unnamed = await nodes.start("page-id")
    assert "<strong>Node page-id</strong>" in (await unnamed.get("/claim")).body


# -- POST /host/run: the node asks its host to hold it (run.json) ----------------------------

async def test_the_host_asks_a_node_to_sleep_it_writes_run_json_and_exits_0(nodes: NodeLauncher) -> None:
    token = new_secret()
    nodes.redact(token)
    node = await nodes.start("sleepy", extra={"CADRE_HOST_TOKEN": token})
    asked = {"state": "sleeping", "wake_at": "2030-01-01T07:00:00Z", "reason": "nothing to do\nuntil seven"}
    answer = await node.post("/host/run", token=token, json=asked)
    assert answer.status == 202, answer.body
    assert await node.wait_exit() == 0
    run = node.node_dir / "run.json"
    assert json.loads(run.read_text()) == {"state": "sleeping", "wake_at": "2030-01-01T07:00:00Z",
                                           "reason": "nothing to do until seven"}
    assert run.stat().st_mode & 0o777 == 0o600


async def test_only_the_host_token_may_ask_and_only_what_the_contract_says(nodes: NodeLauncher) -> None:
    token = new_secret()
    nodes.redact(token)
    node = await nodes.start("held", extra={"CADRE_HOST_TOKEN": token})
    owner = (await node.claim("family")).body["owner_token"]
    nodes.redact(owner)
    assert (await node.post("/host/run", json={"state": "paused"})).status == 401
    assert (await node.post("/host/run", token=owner, json={"state": "paused"})).status == 403
    for bad in ({"state": "asleep"}, {"state": "paused", "wake_at": "2030-01-01T07:00:00Z"},
                {"state": "sleeping", "wake_at": "tomorrow"}, {"state": "done", "reason": "x" * 201},
                {"state": "done", "extra": 1}):
        assert (await node.post("/host/run", token=token, json=bad)).status == 400, bad
    assert node.running and not (node.node_dir / "run.json").exists()
