"""What the host takes from a node's /status: bounded, checked, and read over a fresh connection."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from cadre_desktop.host.core.supervision.probe import MAX_STATUS_BYTES, HttpStatusFetcher, sanitize_status

HOSTILE = "\x1b]0;pwned\x07\x1b[2J"


@pytest.fixture
def node_server(serve_handler):
    async def serve(body: bytes, seen: list | None = None) -> int:
        async def status(request):
            if seen is not None:
                seen.append(request.transport)
            return web.Response(body=body, content_type="application/json")
        return await serve_handler("GET", "/status", status)
    return serve


def test_strings_of_a_status_answer_are_checked_or_escaped():
    got = sanitize_status({"node_id": "n1" + HOSTILE, "peer_id": "cn1" + "\n", "state": "joined",
                           "cadre": "Fam" + HOSTILE, "error": "e" * 500 + HOSTILE, "version": 7,
                           "extra": "ignored"})
    assert got["node_id"] is None and got["peer_id"] is None and got["version"] is None
    assert got["cadre"] == "Fam\\x1b]0;pwned\\x07\\x1b[2J"
    cadre, error = got["cadre"], got["error"]
    assert isinstance(cadre, str) and cadre.isprintable() and len(cadre) <= 64
    assert isinstance(error, str) and error.isprintable() and len(error) <= 300
    assert "extra" not in got
    assert sanitize_status({"state": "rm -rf"})["state"] is None


async def test_the_fetcher_returns_checked_values_and_refuses_an_oversized_answer(node_server):
    fetch = HttpStatusFetcher("127.0.0.1", timeout_s=2)
    try:
        port = await node_server(b'{"state": "joined", "cadre": "x\\u001b[2J", "peer_id": "cn1a"}')
        assert await fetch(port) == {"state": "joined", "cadre": "x\\x1b[2J", "peer_id": "cn1a",
                                     "node_id": None, "error": None, "version": None}
        big = await node_server(b'{"state": "joined", "pad": "' + b"p" * MAX_STATUS_BYTES + b'"}')
        assert await fetch(big) is None
        deep = await node_server(b"[" * 100000)
        assert await fetch(deep) is None
    finally:
        await fetch.close()


async def test_a_probe_after_half_an_interval_opens_a_fresh_connection(node_server):
    seen: list = []
    port = await node_server(b'{"state": "unclaimed"}', seen)
    fetch = HttpStatusFetcher("127.0.0.1", timeout_s=2, fresh_after_s=0.2)
    try:
        await fetch(port)
        await fetch(port)  # right after: the pooled connection is reused (a starting node's quick probes)
        await asyncio.sleep(0.5)  # past fresh_after_s: a new connection
        await fetch(port)
    finally:
        await fetch.close()
    assert seen[0] is seen[1] and seen[2] is not seen[1]
