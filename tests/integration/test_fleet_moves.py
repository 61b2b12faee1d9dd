"""Three real headless hosts pair into a fleet, their hosts run a 3-member etcd cluster on 127.0.0.1
(TLS from their fleet keys), and a claimed node moves from alpha to bravo: the same peer id and
claim there, at generation 1 in the store, and nothing of it left on alpha; a move to an unknown
computer changes nothing."""

from __future__ import annotations

import json

import pytest

from tests.support.fleet_hosts import all_online, ok, pair_by_api, running_hosts, self_id, store_ready
from tests.support.headless import added, running_node
from tests.support.host_calls import claim, claim_secret_of, post_json
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def three(tmp_path):
    with running_hosts(tmp_path, "alpha", "bravo", "charlie") as hosts:
        yield hosts


def test_a_claimed_node_moves_from_alpha_to_bravo_with_its_peer_id_and_claim(three):
    a, b, c = three
    ids = {h.home.name: self_id(h) for h in three}
    node = added(a, "Study")
    secret = claim_secret_of(node)
    assert claim(running_node(a, node["id"]), "family")[0] == 200
    claimed = wait_until(lambda: (v := a.node(node["id"]))["status"] == "joined" and v["peer_id"] and v,
                         timeout=20, interval=0.1, what="the node claimed on alpha")
    assert claimed["generation"] is None and claimed["failover"] is False  # not in the fleet's store yet
    pair_by_api(a, b)
    pair_by_api(a, c)
    all_online(three, ids, timeout=30)
    for h in three:
        store_ready(h)
        assert (h.home / "etcd" / "data" / "member").is_dir()
    # A move to a computer the fleet does not have is refused in words; the node runs on where it is.
    status, doc = a.api("POST", f"/api/nodes/{node['id']}/move", {"to": "nowhere"})
    assert status == 404 and "No computer 'nowhere'" in doc["error"]["message"], doc
    assert a.node(node["id"])["pid"] == claimed["pid"]
    # A move from charlie's command line of alpha's node: alpha moves it (the call is forwarded there).
    moved = c.cli("node", "move", node["id"], "--to", "bravo", "--json")
    assert moved.returncode == 0, moved.stderr
    done = json.loads(moved.stdout)
    assert done["to"]["id"] == ids["bravo"] and done["generation"] == 1 and done["peer_id"] == claimed["peer_id"]
    there = running_node(b, node["id"])
    assert (there["peer_id"], there["cadre"], there["status"]) == (claimed["peer_id"], "family", "joined")
    assert there["generation"] == 1 and there["computer"]["id"] == ids["bravo"]
    # The claim went with it: the same cadre is welcome, another is refused as already claimed.
    url = f"http://127.0.0.1:{there['api_port']}/claim"
    assert post_json(url, {"secret": secret, "cadre": "family"})[0] == 200
    assert post_json(url, {"secret": secret, "cadre": "strangers"})[0] == 409
    # Nothing of it is left on alpha: no record, no copy, no work folder.
    assert a.api("GET", f"/api/nodes/{node['id']}")[0] in (404, 200)  # alpha forwards to bravo now
    assert node["id"] not in {n["id"] for n in ok(a, "GET", "/api/nodes")["nodes"]}
    assert not (a.home / "nodes" / node["id"]).exists()
    assert claimed["pid"] is not None and not _alive(claimed["pid"])
    # Charlie leaves the fleet (alpha and bravo unpair it): its member leaves the cluster, its store is
    # off, and the node on bravo runs on, held at generation 1 by the two left.
    for h in (a, b):
        ok(h, "DELETE", f"/api/fleet/computers/{ids['charlie']}")
    wait_until(lambda: (ok(c, "GET", "/api/fleet")["store"] or {}).get("state") == "off", timeout=30, interval=0.5,
               what="charlie's store off")
    assert not (c.home / "etcd" / "data").exists()
    for h in (a, b):
        store_ready(h)
    assert running_node(b, node["id"])["pid"] == there["pid"]


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
