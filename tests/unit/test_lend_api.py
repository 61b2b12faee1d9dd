"""The lend API over real HTTP on 127.0.0.1, on the lending rig (fake clock, fake driver).

Every status the contract names, the field checks, the lockout by socket
address, the port that opens only while a grant is active, and views that
never carry a token.
"""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest

from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.host.edges.lend_api import LendServer
from cadre_desktop.wire.keys import b64url
from tests.support.lend_rig import OWNER_KEY, LendRig
from tests.support.polling import async_wait_until

GOOD = {"party_id": "friends", "profile": "storage", "bootstrap_nodes": ["10.0.0.1:4001"], "owner_keys": [OWNER_KEY]}


class Api:
    def __init__(self, rig: LendRig, server: LendServer, session: aiohttp.ClientSession) -> None:
        self.rig, self.server, self.session = rig, server, session
        self.bodies: list[str] = []

    async def call(self, method: str, path: str, token: str | None = None, body=None, raw: bytes | None = None,
                   headers: dict | None = None) -> tuple[int, dict, dict]:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        url = f"http://127.0.0.1:{self.server.bound_port}{path}"
        async with self.session.request(method, url, data=data, headers=all_headers) as resp:
            text = await resp.text()
            self.bodies.append(text)
            return resp.status, json.loads(text) if text else {}, dict(resp.headers)


@pytest.fixture
async def api(tmp_path):
    rig = LendRig(tmp_path, lend_max_nodes=3)
    server = LendServer(rig.lending, rig.views, bind_host="127.0.0.1", port=0, max_failures=5, lockout_s=60)
    rig.lending.on_grants_changed = server.sync
    async with aiohttp.ClientSession() as session:
        yield Api(rig, server, session)
    await server.close()
    await rig.close()


def code(body: dict) -> str | None:
    return body.get("error", {}).get("code")


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


async def test_the_port_is_open_only_while_a_grant_is_active(api):
    await api.server.sync()
    assert api.server.bound_port is None
    grant, _ = await api.rig.grant()
    port = api.server.bound_port
    assert port and accepts(port)
    await api.rig.lending.revoke_grant(grant.id)
    assert api.server.bound_port is None and not accepts(port)


async def test_a_borrower_gets_a_node_sees_it_seeds_it_and_ends_its_loan(api):
    grant, token = await api.rig.grant(max_nodes=2)
    status, view, _ = await api.call("POST", f"/grants/{grant.id}/donations", token, GOOD)
    assert status == 201 and view["status"] == "provisioning" and view["party_id"] == "friends"
    assert view["address"].startswith("192.0.2.10:") and view["respawn"]["attempts"] == 0
    seed_token = api.rig.token_of(view["id"], SecretKind.SEED_TOKEN)
    api.rig.answer(view["id"])
    await api.rig.probe.probe_all()
    status, listing, _ = await api.call("GET", f"/grants/{grant.id}", token)
    assert status == 200 and listing["max_nodes"] == 2 and listing["status"] == "active"
    assert [d["status"] for d in listing["donations"]] == ["awaiting_seed"]
    status, seeded, _ = await api.call("POST", f"/grants/{grant.id}/donations/{view['id']}/seed", token,
                                       {"seed": _seed(view["id"], listing["donations"][0]["peer_id"])})
    assert status == 200 and seeded["status"] == "seeded"
    status, ended, _ = await api.call("DELETE", f"/grants/{grant.id}/donations/{view['id']}", token)
    assert (status, ended) == (200, {"id": view["id"], "ended": True})
    assert (await api.call("GET", f"/grants/{grant.id}/donations/{view['id']}", token))[0] == 404
    assert seed_token and api.rig.seeds.calls[0][1] == seed_token
    for text in api.bodies:
        assert token not in text and seed_token not in text


def _seed(donation_id: str, peer_id: str) -> dict:
    return {"version": 1, "donation_id": donation_id, "party_id": "friends", "peer_id": peer_id,
            "owner_key": OWNER_KEY, "signature": b64url(bytes(64))}


async def test_tokens_are_checked_before_anything_else(api):
    grant, token = await api.rig.grant()
    other, other_token = await api.rig.grant()
    path = f"/grants/{grant.id}/donations"
    status, body, headers = await api.call("POST", path, None, GOOD)
    assert (status, code(body), headers.get("WWW-Authenticate")) == (401, "unauthorized", "Bearer")
    assert code((await api.call("POST", path, other_token, GOOD))[1]) == "wrong-token"
    assert (await api.call("POST", "/grants/gr_nosuchgrant0/donations", token, GOOD))[0] == 403
    await api.rig.lending.revoke_grant(grant.id)
    status, body, _ = await api.call("POST", path, token, GOOD)
    assert (status, code(body)) == (410, "grant-revoked")
    assert api.rig.donations.list() == []


async def test_over_a_cap_is_409(api):
    grant, token = await api.rig.grant(max_nodes=1)
    assert (await api.call("POST", f"/grants/{grant.id}/donations", token, GOOD))[0] == 201
    status, body, _ = await api.call("POST", f"/grants/{grant.id}/donations", token, GOOD)
    assert (status, code(body)) == (409, "grant-full")


@pytest.mark.parametrize(("change", "named"), [
    ({"party_id": "two words"}, "party_id"),
    ({"party_id": "x" * 65}, "party_id"),
    ({"party_id": None}, "party_id"),
    ({"profile": "archive"}, "profile"),
    ({"bootstrap_nodes": [f"10.0.0.{i}:1" for i in range(17)]}, "bootstrap_nodes"),
    ({"bootstrap_nodes": ["x" * 257]}, "bootstrap_nodes"),
    ({"bootstrap_nodes": ["a b"]}, "bootstrap_nodes"),
    ({"bootstrap_nodes": "10.0.0.1:4001"}, "bootstrap_nodes"),
    ({"owner_keys": []}, "owner_keys"),
    ({"owner_keys": [b64url(bytes([i]) * 32) for i in range(9)]}, "owner_keys"),
    ({"owner_keys": [b64url(bytes(31))]}, "owner_keys"),
    ({"owner_keys": [b64url(bytes(33))]}, "owner_keys"),
    ({"owner_keys": ["not base64!"]}, "owner_keys"),
    ({"admin": True}, "admin"),
])
async def test_a_bad_field_is_400_and_named(api, change, named):
    grant, token = await api.rig.grant()
    status, body, _ = await api.call("POST", f"/grants/{grant.id}/donations", token, {**GOOD, **change})
    assert (status, code(body)) == (400, "invalid-field") and named in body["error"]["message"]
    assert api.rig.donations.list() == []


async def test_bodies_that_are_not_json_objects_or_too_large_are_refused(api):
    grant, token = await api.rig.grant()
    path = f"/grants/{grant.id}/donations"
    for raw, expected in ((b"[1]", 400), (b"{", 400), (b"[" * 3000 + b"]" * 3000, 400),
                          (json.dumps({**GOOD, "pad": "x" * 9000}).encode(), 413)):
        status, body, _ = await api.call("POST", path, token, raw=raw, headers={"Content-Type": "application/json"})
        assert status == expected and "error" in body


async def test_five_wrong_tokens_from_one_address_lock_it_out_whatever_it_forwards(api):
    grant, token = await api.rig.grant()
    path = f"/grants/{grant.id}"
    codes = [(await api.call("GET", path, f"wrong-{i}", headers={"X-Forwarded-For": f"10.9.9.{i}"}))[0]
             for i in range(6)]
    assert codes == [403] * 5 + [429]
    status, _, headers = await api.call("GET", path, token, headers={"X-Forwarded-For": "10.1.1.1"})
    assert status == 429 and int(headers["Retry-After"]) > 0


async def test_another_grants_donation_is_404(api):
    grant, token = await api.rig.grant()
    other, other_token = await api.rig.grant()
    _, view, _ = await api.call("POST", f"/grants/{other.id}/donations", other_token, GOOD)
    for method in ("GET", "DELETE"):
        status, body, _ = await api.call(method, f"/grants/{grant.id}/donations/{view['id']}", token)
        assert (status, code(body)) == (404, "donation-unknown")
    assert api.rig.drow(view["id"]) is not None


async def test_a_seed_for_a_node_still_starting_is_409_and_a_malformed_one_400(api):
    grant, token = await api.rig.grant()
    _, view, _ = await api.call("POST", f"/grants/{grant.id}/donations", token, GOOD)
    path = f"/grants/{grant.id}/donations/{view['id']}/seed"
    status, body, headers = await api.call("POST", path, token, {"seed": _seed(view["id"], "cn1" + "p" * 32)})
    assert (status, code(body)) == (409, "not-ready") and headers["Retry-After"]
    status, body, _ = await api.call("POST", path, token, {"seed": {"version": 1}})
    assert (status, code(body)) == (400, "invalid-seed")
    assert api.rig.seeds.calls == []


async def test_a_request_whose_body_arrives_after_a_revoke_is_refused(api):
    """The grant is re-read after the body's await: a revoke meanwhile is 410, never 201."""
    grant, token = await api.rig.grant()
    await api.rig.grant()  # another grant keeps the port open
    port = api.server.bound_port
    body = json.dumps(GOOD).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"POST /grants/{grant.id}/donations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                 + body[:10])
    await writer.drain()
    await async_wait_until(lambda: any(c.busy for m in api.server.guard._by_source.values() for c in m.values()),
                           timeout=10, what="the request's handler to be running")
    await api.rig.lending.revoke_grant(grant.id)
    writer.write(body[10:])
    await writer.drain()
    async with asyncio.timeout(15):
        answer = await reader.read(4096)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 410"), answer[:200]
    assert b"grant-revoked" in answer
    assert api.rig.donations.list() == [] and api.rig.orch.spawned == []
