"""Two homes of one user share a keyring and never touch each other's entries.

Keyring entries were keyed by node id only, so a Remove in one home of an id
it does not have deleted the claim secret of a node in another home (which then
went into error at its next start, its claim code gone). Entries are now named
`<home id>/<node id>/<kind>`, and a home deletes entries only of ids it has or
had. A home from before home ids gets one on its first start, and its entries
are moved to their new names, keeping their values.
"""

from __future__ import annotations

import json
import secrets

from tests.support.headless import host_settings
from tests.support.host_calls import answered, claim_secret_of, running
from tests.support.polling import wait_until
from tests.support.secret_items import entry_name, home_id, secret_items, store_secret

STAMP = "2026-01-01T00:00:00.000Z"


def test_a_remove_in_one_home_never_deletes_a_secret_of_another(hosts, rng, tmp_path, secret_service):
    settings = host_settings(rng)
    a = hosts(settings, home=tmp_path / "a").start()
    # A range of its own for the second home, held as the first's is (tests/support/port_blocks.py).
    b = hosts({**settings, "port_range": host_settings(rng)["port_range"]}, home=tmp_path / "b").start()
    na = answered(a, "POST", "/api/nodes", {"name": "in a"})[1]["id"]
    nb = answered(b, "POST", "/api/nodes", {"name": "in b"})[1]["id"]
    running(a, na)
    running(b, nb)
    assert home_id(a.home) != home_id(b.home)
    before = secret_items(secret_service)
    a_entry, b_entry = entry_name(a.home, na), entry_name(b.home, nb)
    assert a_entry in before and b_entry in before

    status, body = answered(a, "DELETE", f"/api/nodes/{nb}")  # an id home a does not have
    assert status == 200 and body["existed"] is False
    assert secret_items(secret_service).get(b_entry) == before[b_entry], "home a deleted home b's secret"

    assert b.stop() == 0
    b.start()
    assert claim_secret_of(running(b, nb)) == before[b_entry], "home b lost its claim code"

    assert answered(a, "DELETE", f"/api/nodes/{na}")[0] == 200
    after = secret_items(secret_service)
    assert a_entry not in after and after.get(b_entry) == before[b_entry]


def test_a_home_from_before_home_ids_moves_its_entries_on_its_first_start(hosts, rng, tmp_path, secret_service):
    settings = host_settings(rng)
    low = settings["port_range"][0]
    home = tmp_path / "old"
    home.mkdir()
    (home / "hosted-nodes.json").write_text(json.dumps({"version": 1, "nodes": {
        "nold0001": {"name": "Unclaimed", "status": "unclaimed", "mode": "claim", "handle": "nold0001.0badf00d",
                     "api_port": low,
                     "p2p_port": low + 1, "created_at": STAMP, "updated_at": STAMP},
        "nold0002": {"name": "Given up", "status": "error", "mode": "claim", "error": "gave up",
                     "created_at": STAMP, "updated_at": STAMP},
    }, "removing": {"nold0009": STAMP}}))
    values = {node_id: secrets.token_urlsafe(32) for node_id in ("nold0001", "nold0002", "nold0009")}
    for node_id, value in values.items():
        store_secret(secret_service, f"{node_id}/claim-secret", value)
    host = hosts(settings, home=home).start()

    view = running(host, "nold0001")
    assert claim_secret_of(view) == values["nold0001"], "the node lost its claim code in the move"
    wait_until(lambda: json.loads((home / "hosted-nodes.json").read_text()).get("keyring_layout") == 2,
               timeout=20, what="the move of the keyring entries")
    items = secret_items(secret_service)
    assert items[entry_name(home, "nold0001")] == values["nold0001"]
    assert items[entry_name(home, "nold0002")] == values["nold0002"]
    assert not {f"{n}/claim-secret" for n in values} & set(items), "an entry kept its old name"
    assert not [u for u in items if "nold0009" in u], "the unfinished removal left its secret"
    assert (home / "hosted-nodes.json.v1.bak").exists()
    assert host.stop() == 0
