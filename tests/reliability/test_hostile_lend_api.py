"""Hostile input to the lend API: fuzzed requests over real HTTP, like the node's claim API.

One lend API serves the module from a thread (tests/support/lend_server.py: the
real server, service, lifecycle and supervisor on a fake driver), with its
lockout opened wide so the fuzzer reaches the checks behind it (the real host's
lockout is tested in tests/integration/test_lending.py). Hypothesis draws
paths, bodies (bytes, JSON of every shape, near-miss tokens, deep nesting,
bombs), headers, encodings and sizes. Properties: never a 5xx, the server never
stops answering, and nothing is lent, seeded or ended without the grant token.
"""

from __future__ import annotations

import http.client
import urllib.parse

import pytest
from hypothesis import example, given, seed
from hypothesis import strategies as st

from cadre_desktop.host.lending.donations import Donation, DonationStatus
from cadre_desktop.host.lending.grants import Grant
from tests.support.hostile import FUZZ, SEED, checked_answer, json_values, near_misses, requests, texts
from tests.support.lend_rig import OWNER_KEY
from tests.support.lend_server import ThreadedLendServer
from tests.support.node_server import raw_request, send_raw


class LentServer(ThreadedLendServer):
    grant: Grant  # the grant below, its token and one lent node
    token: str | None
    donation: Donation


@pytest.fixture(scope="module")
def lend(tmp_path_factory):
    served = LentServer(tmp_path_factory.mktemp("lend"))
    grant, token = served.run(served.rig.grant(max_nodes=100))
    donation = served.run(served.rig.request(grant))
    served.rig.answer(donation.id)
    served.run(served.rig.probe.probe_all())
    served.grant, served.token, served.donation = grant, token, donation
    yield served
    served.close()


def paths(lend) -> st.SearchStrategy[tuple[str, str]]:
    grant_ids = st.one_of(st.just(lend.grant.id), st.just("gr_nosuchgrant0"), texts)
    donation_ids = st.one_of(st.just(lend.donation.id), st.just("grn_nosuchdonat"), texts)
    quote = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
    return st.one_of(
        st.builds(lambda g: ("POST", f"/grants/{quote(g)}/donations"), grant_ids),
        st.builds(lambda g: ("GET", f"/grants/{quote(g)}"), grant_ids),
        st.builds(lambda g, d: ("GET", f"/grants/{quote(g)}/donations/{quote(d)}"), grant_ids, donation_ids),
        st.builds(lambda g, d: ("POST", f"/grants/{quote(g)}/donations/{quote(d)}/seed"), grant_ids, donation_ids),
        st.builds(lambda g, d: ("DELETE", f"/grants/{quote(g)}/donations/{quote(d)}"), grant_ids, donation_ids),
        st.sampled_from([("PUT", "/grants"), ("GET", "/"), ("PATCH", "/grants/x/donations"), ("GET", "/..%2f")]),
    )


FIELDS = {
    "party_id": texts, "profile": st.sampled_from(["storage", "transaction", "archive", ""]) | texts,
    "bootstrap_nodes": st.lists(texts, max_size=20) | json_values,
    "owner_keys": st.lists(st.just(OWNER_KEY) | texts, max_size=10) | json_values,
    "seed": json_values | st.fixed_dictionaries({"version": st.just(1), "donation_id": texts}),
}


def send(lend, method: str, path: str, request) -> tuple[int, dict]:
    body, headers, chunked = request
    try:
        status, data, _ = raw_request(lend.port, method, path, body if method != "GET" else b"", headers,
                                      chunked=chunked and method != "GET", timeout=15)
    except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
        # A refusal at the HTTP layer may close the connection before the body is all sent.
        return 400, {}
    return checked_answer(status, data, f"{method} {path}: ")


def authorized(request, token: str) -> bool:
    scheme, _, given = dict(request[1]).get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and given.strip() == token


@seed(SEED)
@FUZZ
@given(data=st.data())
@example(data=None)
def test_fuzzed_lend_api_calls_never_5xx_and_never_act_without_the_grant_token(lend, data):
    rig = lend.rig
    if data is None:  # the deep nesting that once made json.loads raise RecursionError
        method, path = "POST", f"/grants/{lend.grant.id}/donations"
        request = (b"[" * 3000 + b"]" * 3000, [("Content-Type", "application/json"),
                                               ("Authorization", f"Bearer {lend.token}")], False)
    else:
        method, path = data.draw(paths(lend), "path")
        request = data.draw(requests(FIELDS, token=lend.token), "request")
    before = {d.id for d in rig.donations.list()}
    seeds_before = len(rig.seeds.calls)
    status, doc = send(lend, method, path, request)
    after = {d.id for d in rig.donations.list()}
    ok = authorized(request, lend.token)
    if after - before:
        assert ok and status == 201, "a node was lent without the grant token"
    if before - after:
        assert ok and status == 200 and method == "DELETE", "a loan ended without the grant token"
    if len(rig.seeds.calls) > seeds_before:
        assert ok, "a seed reached a node without the grant token"
    assert 200 <= raw_request(lend.port, "GET", f"/grants/{lend.grant.id}", b"",
                              [("Authorization", f"Bearer {lend.token}")])[0] < 500
    if lend.donation.id not in after:  # the fuzzer ended it (rightly): lend another for the next examples
        lend.donation = lend.run(rig.request(lend.grant))
        rig.answer(lend.donation.id)
        lend.run(rig.probe.probe_all())
    assert rig.donations.get(lend.donation.id).status in (DonationStatus.AWAITING_SEED, DonationStatus.SEEDED)


@seed(SEED)
@FUZZ
@given(token=near_misses("x" * 43) | texts)
def test_near_miss_tokens_never_open_the_grant(lend, token):
    real = lend.token
    for variant in {token, real.upper(), real[:-1], real + "x", " " + real + " x"}:
        if variant.strip() == real or not variant.isascii() or not variant.isprintable():
            continue
        status, _, _ = raw_request(lend.port, "GET", f"/grants/{lend.grant.id}", b"",
                                   [("Authorization", f"Bearer {variant}")])
        assert status in (401, 403, 429), (variant, status)


def test_malformed_http_never_5xx_nor_stops_the_lend_api(lend):
    junk = [b"GARBAGE\r\n\r\n", b"POST /grants/x/donations HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"POST /grants/x/donations HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST /grants/x/donations HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
            b"GET /grants/\x00 HTTP/1.1\r\n\r\n", b"\xff" * 9000 + b"\r\n\r\n",
            b"GET " + b"/" * 20000 + b" HTTP/1.1\r\n\r\n"]
    for raw in junk:
        reply = send_raw(lend.port, raw)
        if reply:
            assert int(reply.split(b" ", 2)[1]) < 500, (raw[:60], reply[:200])
    assert raw_request(lend.port, "GET", f"/grants/{lend.grant.id}", b"",
                       [("Authorization", f"Bearer {lend.token}")])[0] == 200


def test_the_grant_token_is_compared_only_with_compare_digest(lend, monkeypatch):
    import hmac

    calls = []

    def compare_digest(a, b):
        calls.append((a, b))
        return False
    monkeypatch.setattr(hmac, "compare_digest", compare_digest)
    from cadre_desktop.host.lending.service import LendRefused

    with pytest.raises(LendRefused):
        lend.rig.lending.authorize(lend.grant.id, lend.token)  # the right token, refused: nothing else decides
    assert len(calls) == 1
