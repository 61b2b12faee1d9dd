"""A new advertised address reaches every running node, with no person involved."""

from __future__ import annotations

import json
import signal

import psutil

from tests.support.claim_link import claim
from tests.support.headless import added, fast_settings, running_node
from tests.support.polling import wait_until


def test_changed_address_restarts_nodes_with_it_keeping_identity_and_claims(host_factory):
    settings = fast_settings()
    host = host_factory(settings).start()
    claimed = running_node(host, added(host, "Claimed")["id"])
    assert claim(claimed["claim_url"], "family")[0] == 200
    claimed = wait_until(lambda: (n := host.node(claimed["id"]))["status"] == "joined" and n["peer_id"] and n,
                         what="claimed")
    waiting = running_node(host, added(host, "Waiting")["id"])
    assert waiting["advertise_host"] == "127.0.0.1"

    settings["advertise_host"] = "127.0.0.2"
    (host.home / "settings.json").write_text(json.dumps(settings))
    host.proc.send_signal(signal.SIGHUP)  # look at the network now

    def moved(node):
        n = host.node(node["id"])
        return n if n["advertise_host"] == "127.0.0.2" and n["ready"] and n["pid"] != node["pid"] else None

    new_claimed = wait_until(lambda: moved(claimed), timeout=30, what="claimed node restarted")
    new_waiting = wait_until(lambda: moved(waiting), timeout=30, what="waiting node restarted")
    assert new_waiting["claim_url"].startswith(f"http://127.0.0.2:{waiting['api_port']}/claim?")
    assert new_waiting["claim_url"].split("#")[1] == waiting["claim_url"].split("#")[1]
    for _before, after in ((claimed, new_claimed), (waiting, new_waiting)):
        assert after["attempts"] == 0
        assert psutil.Process(after["pid"]).environ()["CADRE_ADVERTISE_HOST"] == "127.0.0.2"
    wait_until(lambda: host.node(waiting["id"])["peer_id"] == waiting["peer_id"], what="same peer id")
    assert new_claimed["peer_id"] == claimed["peer_id"]
    assert host.node(claimed["id"])["status"] == "joined" and host.node(claimed["id"])["cadre"] == "family"
    assert host.node(waiting["id"])["status"] == "unclaimed"
    host.stop()
