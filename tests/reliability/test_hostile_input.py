"""Hostile input to the node: fuzzed claims, invitations and joins over real HTTP.

Two real reference nodes serve the whole module: an unclaimed one (for
`POST /claim`) and a claimed one with an owner token (for `POST /invitations`
and `POST /join`). Their throttles are opened wide so the fuzzer reaches the
checks behind them; two fresh nodes with the default throttle prove that 50
wrong secrets in a row are refused. Hypothesis draws bodies (bytes, JSON of
every shape, near-miss secrets, deep nesting), headers, encodings and sizes.
Properties: never a 5xx, the process never dies, nothing is claimed, minted or
admitted without its secret; and secrets are compared in constant time.
"""

from __future__ import annotations

import hmac
import http.client
import json

import pytest
from hypothesis import example, given, seed
from hypothesis import strategies as st

from cadre_desktop.node.cadre import invitations
from cadre_desktop.node.cadre.invitation_code import InvitationCode, parse_invitation
from cadre_desktop.wire.http_status import answer_to
from cadre_desktop.wire.refusal import RequestRefused
from tests.support import syntax
from tests.support.hostile import FUZZ, SEED, checked_answer, json_values, near_misses, requests, texts
from tests.support.imports import sources
from tests.support.node_server import NodeServer, send_raw

WIDE_OPEN = {"CADRE_CLAIM_MAX_FAILURES": "1000", "CADRE_CLAIM_LOCKOUT_MS": "100", "CADRE_BODY_TIMEOUT_MS": "500"}
CLAIM_SECRET = "fuzz-claim-secret-" + "k" * 30


def setup_module(module):
    print(f"hypothesis seed: CADRE_TEST_SEED={SEED}")


@pytest.fixture(scope="module")
def unclaimed(tmp_path_factory):
    node = NodeServer(tmp_path_factory.mktemp("fuzz"), "fuzz-unclaimed", CADRE_CLAIM_SECRET=CLAIM_SECRET,
                      **WIDE_OPEN).start()
    yield node
    assert node.stop() == 0, node.log.read_text()[-3000:]


class ClaimedNode(NodeServer):
    owner_token: str
    invitation: InvitationCode  # one it minted
    members_before: dict  # GET /members before any fuzzing


@pytest.fixture(scope="module")
def claimed(tmp_path_factory):
    node = ClaimedNode(tmp_path_factory.mktemp("fuzz"), "fuzz-claimed", CADRE_CLAIM_SECRET=CLAIM_SECRET, **WIDE_OPEN)
    node.start()
    status, body = node.json("POST", "/claim", {"secret": CLAIM_SECRET, "cadre": "fuzzers"})
    assert status == 200, body
    node.owner_token = body["owner_token"]
    status, body = node.json("POST", "/invitations", {}, token=node.owner_token)
    assert status == 201, body
    node.invitation = parse_invitation(body["invitation"])
    node.members_before = node.json("GET", "/members", token=node.owner_token)[1]
    yield node
    assert node.stop() == 0, node.log.read_text()[-3000:]


def send(node: NodeServer, path: str, request) -> tuple[int, dict]:
    body, headers, chunked = request
    try:
        status, data, _ = node.request("POST", path, body, headers, chunked=chunked, timeout=15)
    except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
        # A refusal at the HTTP layer (oversized, undecodable) may close the
        # connection before the whole body is sent, or before the answer is read.
        assert node.alive, "the node died"
        assert node.request("GET", "/status")[0] == 200, "the node stopped answering"
        return 400, {}
    answer = checked_answer(status, data)
    assert node.alive, "the node died"
    return answer


# -- fuzzing ---------------------------------------------------------------------------------------------

@seed(SEED)
@FUZZ
@given(request=requests({"secret": texts | near_misses(CLAIM_SECRET), "cadre": texts}))
@example(request=(b"[" * 2000 + b"]" * 2000, [("Content-Type", "application/json")], False))
def test_fuzzed_claims_never_5xx_and_never_claim_without_the_secret(unclaimed, request):
    status, doc = send(unclaimed, "/claim", request)
    assert status in (400, 403, 408, 413, 429), (status, doc)
    assert unclaimed.json("GET", "/status")[1]["state"] == "unclaimed"


@seed(SEED)
@FUZZ
@given(data=st.data())
def test_fuzzed_invitation_mints_never_5xx_and_never_mint_without_the_owner_token(claimed, data):
    request = data.draw(requests({"ttl_s": st.integers() | json_values}, token=claimed.owner_token), "request")
    status, doc = send(claimed, "/invitations", request)
    scheme, _, given = dict(request[1]).get("Authorization", "").partition(" ")
    authorized = scheme.lower() == "bearer" and given.strip() == claimed.owner_token
    if status == 201:
        assert authorized, "an invitation was minted without the owner token"
        assert parse_invitation(doc["invitation"]).peer
    else:
        assert status in (400, 401, 403, 408, 409, 413, 429), (status, doc)


@seed(SEED)
@FUZZ
@given(data=st.data())
def test_fuzzed_joins_never_5xx_and_never_admit_without_the_invitation_secret(claimed, data):
    invitation = claimed.invitation
    request = data.draw(requests({
        "invitation_id": st.just(invitation.id) | texts,
        "secret": near_misses(invitation.secret) | texts,
        "peer_id": texts, "public_key": texts, "signature": texts,
    }), "request")
    status, doc = send(claimed, "/join", request)
    assert status in (400, 403, 404, 408, 409, 410, 413, 429), (status, doc)
    assert claimed.json("GET", "/members", token=claimed.owner_token)[1] == claimed.members_before


def test_malformed_http_never_5xx_nor_kills_the_node(unclaimed):
    junk = [b"GARBAGE\r\n\r\n", b"POST /claim HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"POST /claim HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST /claim HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
            b"POST /claim HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", b"POST /cl\x00aim HTTP/1.1\r\n\r\n",
            b"POST /claim HTTP/9.9\r\n\r\n", b"\xff" * 9000 + b"\r\n\r\n", b"POST " + b"/" * 20000 + b" HTTP/1.1\r\n\r\n"]
    for raw in junk:
        reply = send_raw(unclaimed.api_port, raw)
        if reply:
            status = int(reply.split(b" ", 2)[1])
            assert status < 500, (raw[:60], reply[:200])
        assert unclaimed.alive
    assert unclaimed.json("GET", "/status")[0] == 200


# -- throttling -------------------------------------------------------------------------------------------

def test_fifty_wrong_claim_secrets_in_a_row_are_throttled(tmp_path):
    node = NodeServer(tmp_path, "throttled", CADRE_CLAIM_SECRET=CLAIM_SECRET).start()
    try:
        codes = [node.json("POST", "/claim", {"secret": f"wrong-{i:02d}-" + "x" * 20, "cadre": "guessers"})[0]
                 for i in range(50)]
        assert codes[:5] == [403] * 5 and codes[5:] == [429] * 45, codes
        status, _, headers = node.request("POST", "/claim", json.dumps({"secret": CLAIM_SECRET, "cadre": "g"}).encode(),
                                          [("Content-Type", "application/json")])
        assert status == 429 and int(headers["Retry-After"]) > 0, "the right secret got through a lock"
        assert node.json("GET", "/status")[1]["state"] == "unclaimed"
    finally:
        assert node.stop() == 0


def test_fifty_wrong_invitation_secrets_in_a_row_are_throttled(tmp_path):
    node = NodeServer(tmp_path, "inviter", CADRE_CLAIM_SECRET=CLAIM_SECRET).start()
    try:
        token = node.json("POST", "/claim", {"secret": CLAIM_SECRET, "cadre": "c"})[1]["owner_token"]
        code = parse_invitation(node.json("POST", "/invitations", {}, token=token)[1]["invitation"])
        codes = [node.json("POST", "/join", {"invitation_id": code.id, "secret": f"nope-{i}-" + "y" * 30,
                                            "peer_id": "p" * 20, "public_key": "A" * 43, "signature": "A" * 86})[0]
                 for i in range(50)]
        assert codes[:5] == [403] * 5 and codes[5:] == [429] * 45, codes
        assert node.json("GET", "/members", token=token)[1]["members"][1:] == []
    finally:
        assert node.stop() == 0


# -- constant-time comparison ---------------------------------------------------------------------------

class Spy:
    """hmac.compare_digest that records its calls and answers what the test says."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[tuple] = []

    def __call__(self, a, b):
        self.calls.append((a, b))
        return self.answer


def test_claim_secret_is_compared_only_with_compare_digest(tmp_path, monkeypatch):
    from tests.support.clock import FakeClock
    from tests.support.node_rig import SECRET, make_node

    node = make_node(tmp_path, FakeClock())
    spy = Spy(answer=True)
    monkeypatch.setattr(hmac, "compare_digest", spy)
    # A wrong secret that compare_digest (forced) calls right is accepted: nothing else decides.
    assert node.claim("10.0.0.9", "not-the-secret-at-all", "family")["cadre"] == "family"
    assert spy.calls == [(b"not-the-secret-at-all", SECRET.encode())]


def test_invitation_secret_and_owner_token_are_compared_only_with_compare_digest(tmp_path, monkeypatch):
    from tests.support.clock import FakeClock
    from tests.support.node_rig import SECRET, make_node

    node = make_node(tmp_path, FakeClock())
    token = node.claim("10.0.0.9", SECRET, "family")["owner_token"]
    code = parse_invitation(invitations.mint_invitation(node)["invitation"])
    spy = Spy(answer=False)
    monkeypatch.setattr(hmac, "compare_digest", spy)
    with pytest.raises(RequestRefused) as err:
        node.authorize_owner(token)  # the right token, refused because compare_digest said no
    assert answer_to(err.value).status == 403 and spy.calls
    spy.calls.clear()
    with pytest.raises(RequestRefused) as err:
        invitations.admit(node, "10.0.0.9", invitation_id=code.id, secret=code.secret, peer_id="p",
                          public_key=b"\0" * 32, signature=b"\0" * 64)
    assert answer_to(err.value).code == "invitation-invalid" and len(spy.calls) == 1


def test_control_api_token_is_compared_only_with_compare_digest(tmp_path, monkeypatch):
    import urllib.request

    from tests.support.served_host import ServedHost

    served = ServedHost(tmp_path)
    try:
        spy = Spy(answer=True)
        monkeypatch.setattr(hmac, "compare_digest", spy)
        req = urllib.request.Request(served.server.url + "/api/nodes",
                                     headers={"Authorization": "Bearer wrong-token"})
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as resp:
            assert resp.status == 200
        assert spy.calls == [(b"wrong-token", served.server.token.encode())]
    finally:
        monkeypatch.undo()
        served.close()


SECRET_WORDS = ("secret", "token", "digest", "sha256")


def test_no_secret_is_compared_with_an_ordinary_equality():
    """A backstop for new code: `==` or `!=` on anything named like a secret is a timing leak."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "cadre_desktop"
    files = sources("node") + sources("wire") + sources("host/edges") + sources("host/lending")
    files += [root / "cli" / "client.py"]

    def equalities_on_secrets(source: str) -> list[str]:
        found = []
        for node in ast.walk(syntax.parse(source)):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                text = ast.unparse(node).lower()
                if any(word in text for word in SECRET_WORDS):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
        return found

    # The scan can fail: a planted comparison is found (and a harmless one is not).
    assert equalities_on_secrets("if given != self.owner_token:\n    refuse()\nif n == 3:\n    pass\n") == [
        "1: given != self.owner_token"]
    found = [f"{path.relative_to(root.parent)}:{line}" for path in files
             for line in equalities_on_secrets(path.read_text())]
    assert all(path.is_file() for path in files) and len(files) > 10
    assert not found, found


# -- regressions found by the fuzzer -----------------------------------------------------------------------

def test_deeply_nested_json_is_a_400_not_a_500(unclaimed, tmp_path):
    """Bug: 2 KiB of '[[[[...' made json.loads raise RecursionError: a 500 with a traceback in the log."""
    deep = b"[" * 2000 + b"]" * 2000
    status, data, _ = unclaimed.request("POST", "/claim", deep, [("Content-Type", "application/json")])
    assert status == 400 and json.loads(data)["error"]["code"] == "invalid-json"
    import urllib.error
    import urllib.request

    from tests.support.served_host import ServedHost

    served = ServedHost(tmp_path)
    try:
        req = urllib.request.Request(served.server.url + "/api/nodes", data=deep, method="POST",
                                     headers={"Authorization": f"Bearer {served.server.token}"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10)
        assert err.value.code == 400 and json.loads(err.value.read())["error"]["code"] == "bad_request"
    finally:
        served.close()


def test_body_not_in_its_content_encoding_is_a_400_not_a_500(unclaimed, tmp_path):
    """Bug: `Content-Encoding: gzip` on a body that is not gzip was a 500 with a traceback in the log."""
    status, data, _ = unclaimed.request("POST", "/claim", b'{"secret": "x", "cadre": "y"}',
                                        [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
    assert status == 400 and json.loads(data)["error"]["code"] == "bad-request"
    import urllib.error
    import urllib.request

    from tests.support.served_host import ServedHost

    served = ServedHost(tmp_path)
    try:
        req = urllib.request.Request(served.server.url + "/api/nodes", data=b"{}", method="POST",
                                     headers={"Authorization": f"Bearer {served.server.token}",
                                              "Content-Encoding": "gzip"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10)
        assert err.value.code == 400
    finally:
        served.close()
