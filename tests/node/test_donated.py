"""A donated node over real HTTP: awaiting_seed, POST /seed, and what it refuses.

The node is started as a host starts a lent node (CADRE_DONATION_ID and the
others, environment only), seeded by a key the test holds, and every way of
getting the seed wrong is refused with nothing changed.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cadre_desktop.wire.keys import b64url
from cadre_desktop.wire.seed import sign_seed
from tests.support.node_process import NodeLauncher, NodeProcess

DONATED_KEYS = {"node_id", "peer_id", "state", "cadre", "error", "version", "generation", "donation_id", "party", "profile"}


class Owner:
    """A borrower's owner key pair."""

    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()

    @property
    def public(self) -> str:
        return b64url(self.key.public_key().public_bytes_raw())

    def seed(self, donation_id: str, party_id: str, peer_id: str) -> dict:
        return sign_seed(self.key.private_bytes_raw(), donation_id, party_id, peer_id).to_json()


def donated_env(donation_id: str, *owners: Owner, party: str = "friends", **more: str) -> dict[str, str]:
    return {
        "CADRE_DONATION_ID": donation_id,
        "CADRE_PARTY_ID": party,
        "CADRE_OWNER_KEYS": ",".join(o.public for o in owners),
        "CADRE_BOOTSTRAP_NODES": "/ip4/192.0.2.7/tcp/4001,peer.example:4001",
        "CADRE_SEED_TOKEN": secrets.token_urlsafe(32),
        **more,
    }


async def start_donated(nodes: NodeLauncher, donation_id: str, *owners: Owner, **more: str) -> NodeProcess:
    return await nodes.start(donation_id, donated=donated_env(donation_id, *owners, **more))


async def post_seed(node: NodeProcess, seed: dict | None, token: str | None = None):
    return await node.post("/seed", json={"seed": seed}, token=token if token is not None else node.env["CADRE_SEED_TOKEN"])


async def test_a_donated_node_awaits_its_seed_and_says_for_which_donation(nodes: NodeLauncher) -> None:
    node = await start_donated(nodes, "grn_await1", Owner(), CADRE_PROFILE="transaction")
    status = await node.status()
    assert set(status) == DONATED_KEYS
    assert status["state"] == "awaiting_seed"
    assert status["donation_id"] == "grn_await1"
    assert status["party"] is None and status["cadre"] is None
    assert status["profile"] == "transaction"


async def test_a_seed_from_a_pinned_owner_seeds_it_and_survives_a_respawn(nodes: NodeLauncher) -> None:
    owner = Owner()
    node = await start_donated(nodes, "grn_seed1", Owner(), owner)
    peer_id = (await node.status())["peer_id"]
    reply = await post_seed(node, owner.seed("grn_seed1", "friends", peer_id))
    assert reply.status == 200, reply.body
    assert reply.body == {"state": "seeded", "party": "friends", "peer_id": peer_id}
    status = await node.status()
    assert status["state"] == "seeded" and status["party"] == "friends"
    assert await node.stop() == 0
    again = await node.restart()
    assert again["peer_id"] == peer_id
    assert again["state"] == "seeded" and again["party"] == "friends"


async def test_the_same_seed_again_is_200_and_another_is_409(nodes: NodeLauncher) -> None:
    first, second = Owner(), Owner()
    node = await start_donated(nodes, "grn_again", first, second)
    peer_id = (await node.status())["peer_id"]
    seed = first.seed("grn_again", "friends", peer_id)
    assert (await post_seed(node, seed)).status == 200
    assert (await post_seed(node, seed)).status == 200  # a retry after a lost answer
    other = await post_seed(node, second.seed("grn_again", "friends", peer_id))
    assert other.status == 409 and other.error_code == "already-seeded"


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ("unpinned key", 403, "untrusted-key"),
        ("tampered signature", 403, "bad-signature"),
        ("other peer", 400, "seed-mismatch"),
        ("other party", 400, "seed-mismatch"),
        ("other donation", 400, "seed-mismatch"),
        ("missing field", 400, "invalid-seed"),
        ("not an object", 400, "invalid-seed"),
    ],
)
async def test_a_wrong_seed_is_refused_and_changes_nothing(
    nodes: NodeLauncher, change: str, status: int, code: str
) -> None:
    owner = Owner()
    node = await start_donated(nodes, "grn_wrong", owner)
    peer_id = (await node.status())["peer_id"]
    seed: Any = owner.seed("grn_wrong", "friends", peer_id)  # a seed, or on purpose something that is not one
    if change == "unpinned key":
        seed = Owner().seed("grn_wrong", "friends", peer_id)
    elif change == "tampered signature":
        seed["signature"] = b64url(bytes(64))
    elif change == "other peer":
        seed = owner.seed("grn_wrong", "friends", "cn1" + "a" * 32)
    elif change == "other party":
        seed = owner.seed("grn_wrong", "rivals", peer_id)
    elif change == "other donation":
        seed = owner.seed("grn_other", "friends", peer_id)
    elif change == "missing field":
        del seed["owner_key"]
    else:
        seed = "seed-as-a-string"
    reply = await post_seed(node, seed)
    assert (reply.status, reply.error_code) == (status, code), reply.body
    assert (await node.status())["state"] == "awaiting_seed"
    assert not (node.node_dir / "node-state.json").exists() or "seed" not in (
        node.node_dir / "node-state.json"
    ).read_text()


async def test_the_seed_token_is_required_and_wrong_ones_lock_out(nodes: NodeLauncher) -> None:
    owner = Owner()
    node = await start_donated(nodes, "grn_token", owner, CADRE_CLAIM_MAX_FAILURES="3")
    peer_id = (await node.status())["peer_id"]
    seed = owner.seed("grn_token", "friends", peer_id)
    missing = await node.post("/seed", json={"seed": seed})
    assert missing.status == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    codes = [(await post_seed(node, seed, token=secrets.token_urlsafe(32))).status for _ in range(4)]
    assert codes == [403, 403, 403, 429]
    locked = await post_seed(node, seed)  # the right token cannot get through a lock
    assert locked.status == 429 and int(locked.headers["Retry-After"]) > 0
    assert (await node.status())["state"] == "awaiting_seed"


async def test_a_donated_node_cannot_be_claimed(nodes: NodeLauncher) -> None:
    node = await start_donated(nodes, "grn_noclaim", Owner())
    reply = await node.claim("family", secret=secrets.token_urlsafe(24))
    assert reply.status == 409 and reply.error_code == "not-claimable"


async def test_a_hosted_node_takes_no_seed(nodes: NodeLauncher) -> None:
    node = await nodes.start("hosted-noseed")
    reply = await node.post("/seed", json={"seed": {}}, token=secrets.token_urlsafe(32))
    assert reply.status == 409 and reply.error_code == "not-donated"


async def test_the_seed_token_is_in_no_file_of_the_work_folder(nodes: NodeLauncher) -> None:
    owner = Owner()
    node = await start_donated(nodes, "grn_files", owner)
    peer_id = (await node.status())["peer_id"]
    assert (await post_seed(node, owner.seed("grn_files", "friends", peer_id))).status == 200
    token = node.env["CADRE_SEED_TOKEN"]
    for path in node.node_dir.iterdir():
        assert token not in path.read_text(errors="replace")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CADRE_PARTY_ID", ""),
        ("CADRE_PARTY_ID", "two words"),
        ("CADRE_OWNER_KEYS", ""),
        ("CADRE_OWNER_KEYS", "not-a-key"),
        ("CADRE_OWNER_KEYS", ",".join([b64url(bytes([i]) * 32) for i in range(9)])),
        ("CADRE_BOOTSTRAP_NODES", ",".join(f"10.0.0.{i}:4001" for i in range(17))),
        ("CADRE_BOOTSTRAP_NODES", "x" * 300),
        ("CADRE_PROFILE", "archive"),
        ("CADRE_SEED_TOKEN", ""),
        ("CADRE_SEED_TOKEN", "short"),
        ("CADRE_DONATION_ID", "../escape"),
    ],
)
def test_bad_donated_variable_exits_2_naming_it(nodes: NodeLauncher, name: str, value: str) -> None:
    env = nodes.env_for("grn_cfg", donated=donated_env("grn_cfg", Owner(), **{name: value}))
    result = nodes.run_to_exit(env)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert line.startswith("cadre-node: error: ") and name in line and len(line.splitlines()) == 1
    assert env["CADRE_SEED_TOKEN"] == "" or env["CADRE_SEED_TOKEN"] not in line


def test_a_donated_node_with_a_claim_secret_too_exits_2(nodes: NodeLauncher) -> None:
    env = nodes.env_for("grn_both", donated=donated_env("grn_both", Owner()),
                        extra={"CADRE_CLAIM_SECRET": secrets.token_urlsafe(24)})
    result = nodes.run_to_exit(env)
    assert result.returncode == 2 and "CADRE_DONATION_ID" in result.stderr


def test_a_party_without_a_donation_id_exits_2(nodes: NodeLauncher) -> None:
    env = nodes.env_for("cfg-party", extra={"CADRE_PARTY_ID": "friends"})
    result = nodes.run_to_exit(env)
    assert result.returncode == 2 and "CADRE_PARTY_ID" in result.stderr


def test_the_seed_token_is_compared_only_with_compare_digest(tmp_path, monkeypatch) -> None:
    import hmac

    from cadre_desktop.node.cadre.donated import accept_seed
    from cadre_desktop.node.config import load_config
    from cadre_desktop.node.identity import load_or_create_identity
    from cadre_desktop.node.node import Node
    from cadre_desktop.node.state import StateStore
    from cadre_desktop.wire.http_status import answer_to
    from cadre_desktop.wire.refusal import RequestRefused
    from tests.support.clock import FakeClock

    env = donated_env("grn_spy", Owner())
    config = load_config({"CADRE_NODE_ID": "grn_spy", "CADRE_NODE_DIR": str(tmp_path), "CADRE_API_HOST": "127.0.0.1",
                          "CADRE_API_PORT": "41001", "CADRE_P2P_PORT": "41002",
                          "CADRE_ADVERTISE_HOST": "127.0.0.1", **env})
    node = Node(config, load_or_create_identity(tmp_path), StateStore(tmp_path, "grn_spy"), FakeClock(), "test")
    calls = []

    def spy(a, b):
        calls.append((a, b))
        return False

    monkeypatch.setattr(hmac, "compare_digest", spy)
    with pytest.raises(RequestRefused) as err:
        accept_seed(node, "10.0.0.9", env["CADRE_SEED_TOKEN"], {"seed": {}})  # the right token, refused
    assert answer_to(err.value).code == "wrong-token"
    assert calls == [(env["CADRE_SEED_TOKEN"].encode(), env["CADRE_SEED_TOKEN"].encode())]
