"""Three real headless hosts on one machine pair into a fleet by code and act on each other's nodes.

Each host has its own home, its own keyring (a file backend each) and its own fleet port on
127.0.0.1; the nodes are the reference node (through the flaky wrapper, so one can be broken).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.fleet_hosts import all_online, computer, fleet_host, fleet_nodes, ok, pair_by_api, running_hosts, self_id, wait_state
from tests.support.headless import added, running_node
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def three(tmp_path):
    with running_hosts(tmp_path, "alpha", "bravo", "charlie") as hosts:
        yield hosts


def pair_by_cli(inviter, joiner) -> None:
    shown = inviter.cli("fleet", "invite", "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert set(doc) == {"code", "expires_at", "address"}
    joined = joiner.cli("fleet", "join", doc["code"], doc["address"])
    assert joined.returncode == 0, joined.stderr
    assert doc["code"] not in joined.stdout + joined.stderr


def test_three_computers_pair_by_code_and_act_on_each_others_nodes(three):
    a, b, c = three
    ids = {h.home.name: self_id(h) for h in three}
    nodes = {h.home.name: added(h, f"node of {h.home.name}")["id"] for h in three}
    for h in three:
        running_node(h, nodes[h.home.name])
    pair_by_cli(a, b)
    pair_by_api(a, c)
    # a introduced c to b and b to c: every computer sees the other two online
    all_online(three, ids)
    for h in three:
        def every_node(h=h):
            doc = fleet_nodes(h)
            return doc if len(doc["nodes"]) == 3 else None
        listing = wait_until(every_node, timeout=20, interval=0.2, what=f"every node on {h.home.name}")
        where = {n["id"]: n["computer"]["id"] for n in listing["nodes"]}
        assert where == {nodes[name]: ids[name] for name in ids}, listing
        assert {n["computer"]["name"] for n in listing["nodes"]} == {"alpha", "bravo", "charlie"}
    # each says how busy it is when asked who it is (the window's header of each computer shows it)
    load = wait_until(lambda: computer(a, ids["bravo"]).get("load"), timeout=20, interval=0.2, what="bravo's load on alpha")
    assert set(load) == {"cpu_percent", "memory_percent"} and any(v is not None for v in load.values())
    # Retry from charlie on bravo's node, which bravo gave up on
    node = nodes["bravo"]
    (b.home / "nodes" / node / "crash").write_text("")
    ok(b, "POST", f"/api/nodes/{node}/restart")
    wait_until(lambda: b.node(node)["status"] == "error", timeout=60, interval=0.2, what="bravo's node given up")
    (b.home / "nodes" / node / "crash").unlink()
    retried = c.cli("node", "retry", node, "--json")
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["computer"]["id"] == ids["bravo"]
    running_node(b, node)
    # Remove from charlie of bravo's node
    removed = c.cli("node", "remove", node, "--yes")
    assert removed.returncode == 0, removed.stderr
    wait_until(lambda: b.api("GET", f"/api/nodes/{node}")[0] == 404, timeout=30, what="bravo's node gone")
    # bravo stopped: unreachable on alpha and charlie within 15 s, back online when it returns
    b.stop()
    stopped = time.monotonic()
    for h in (a, c):
        wait_state(h, ids["bravo"], "unreachable", timeout=15 - (time.monotonic() - stopped))
    assert computer(a, ids["bravo"])["unreachable_since"]
    b.start()
    for h in (a, c):
        wait_state(h, ids["bravo"], "online", timeout=20)


def test_rename_and_remove_from_the_command_line_unpair_both_sides(tmp_path):
    a, c = fleet_host(tmp_path, "alpha"), fleet_host(tmp_path, "charlie")
    for h in (a, c):
        h.start()
    try:
        pair_by_cli(a, c)
        cid, aid = self_id(c), self_id(a)
        wait_state(a, cid, "online")
        renamed = a.cli("fleet", "rename", cid, "Attic box")
        assert renamed.returncode == 0, renamed.stderr
        listed = json.loads(a.cli("fleet", "list", "--json").stdout)["computers"]
        assert {(x["id"], x["name"], x["self"]) for x in listed} == {(aid, "alpha", True), (cid, "Attic box", False)}
        assert set(listed[0]) >= {"id", "name", "address", "state", "self", "last_seen"}
        removed = a.cli("fleet", "remove", cid)
        assert removed.returncode == 0 and "unpinned this computer too" in removed.stdout, removed.stdout + removed.stderr
        assert [x["id"] for x in ok(c, "GET", "/api/fleet")["computers"]] == [cid]
        again = a.cli("fleet", "remove", cid)
        assert again.returncode == 1 and "No computer" in again.stderr
    finally:
        for h in (a, c):
            h.stop()
