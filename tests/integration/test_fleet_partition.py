"""A computer cut off from its fleet by the network: three real headless hosts, each in a
network namespace of its own made by the test (tests/support/netns.py), joined by one switch
on 127.1.N.x, with their 3-member etcd cluster.

Bravo holds a claimed failover node. Its cable out (its veth end down: it runs on, awake, and
reaches nothing): bravo's host cannot renew its lease, so its copy stops before the lease could
have expired anywhere else, and alpha or charlie takes the node over, the same peer id and
claim at a higher generation. At no moment do two copies answer. The cable back: bravo's old
copy stays gone, and the node serves where it went.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

import pytest

from tests.support import netns
from tests.support.fleet_hosts import all_online, local_node, pair_by_api, running_hosts, self_id, store_ready
from tests.support.headless import HeadlessHost, added
from tests.support.host_calls import claim
from tests.support.polling import wait_until

why_not = netns.available()
pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(why_not is not None, reason=why_not or "")]

LEASE_MS = 3000


@pytest.fixture
def home_network():
    net = netns.HomeNetwork(3)
    try:
        yield net
    finally:
        net.close()


def status_of(url: str) -> int | None:
    """A copy's /status: its HTTP status, or None when it refuses, resets, or nothing reaches it."""
    try:
        with urllib.request.urlopen(url, timeout=0.5) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, TimeoutError):
        return None


def test_a_computer_cut_off_stops_its_failover_node_and_another_serves_it_never_twice(tmp_path, home_network):
    net = home_network
    with running_hosts(tmp_path, "alpha", "bravo", "charlie", net=net, fleet_lease_ms=LEASE_MS) as hosts:
        a, b, c = hosts
        ids = {h.home.name: self_id(h) for h in hosts}
        node = added(b, "Study")
        view = wait_until(lambda: (v := b.node(node["id"]))["ready"] and v, timeout=30, what="the node running on bravo")
        assert view["claim_url"].startswith(f"http://{net.address(1)}:"), view["claim_url"]  # on bravo's own address
        assert net.call_in(None, lambda: claim(view, "family"))[0] == 200  # a phone on the home network
        claimed = wait_until(lambda: (v := b.node(node["id"]))["status"] == "joined" and v["peer_id"] and v,
                             timeout=20, interval=0.1, what="the node claimed on bravo")
        pair_by_api(a, b)
        pair_by_api(a, c)
        all_online(hosts, ids, timeout=30)
        for h in hosts:
            store_ready(h)
        turned = b.cli("node", "set", node["id"], "--failover", "on", "--json")
        assert turned.returncode == 0, turned.stderr
        held = wait_until(lambda: (v := b.node(node["id"]))["ready"] and v["generation"] and v["pid"] != claimed["pid"]
                          and v, timeout=30, interval=0.2, what="the node restarted under its lease on bravo")
        for h in (a, c):
            replica = h.home / "replicas" / node["id"] / "replica.bin"
            wait_until(replica.is_file, timeout=30, interval=0.2, what=f"the replica on {h.home.name}")
        old_copy = f"http://{net.address(1)}:{held['api_port']}/status"
        assert net.call_in(1, lambda: status_of(old_copy)) == 200

        net.cut(1)
        cut_at = time.monotonic()
        try:
            def serving_elsewhere() -> tuple[HeadlessHost, dict] | None:
                # Bravo's copy, asked from inside bravo (nothing else reaches it now), never
                # answers while another copy does.
                for h in (a, c):
                    v = local_node(h, node["id"])
                    if v and v["ready"] and v["peer_id"] == claimed["peer_id"]:
                        there = f"http://{net.address(hosts.index(h))}:{v['api_port']}/status"
                        if net.call_in(None, lambda u=there: status_of(u)) == 200:
                            assert net.call_in(1, lambda: status_of(old_copy)) in (None, 503), "two copies answered"
                            return h, v
                return None
            taker, there = wait_until(serving_elsewhere, timeout=LEASE_MS / 1000 + 40, interval=0.2,
                                      what="the node serving on alpha or charlie")
            took_s = time.monotonic() - cut_at
            print(f"partition: served on {taker.home.name} {took_s:.1f} s after bravo was cut off (lease {LEASE_MS} ms)")
            assert there["generation"] > held["generation"], (there, held)
            assert there["cadre"] == "family"
            # Bravo itself, cut off, has stopped its copy (it could not renew its lease).
            assert net.call_in(1, lambda: status_of(old_copy)) in (None, 503)
        finally:
            net.mend(1)
        # The cable back: bravo's old copy stays gone, bravo drops the node, the taker serves on.
        def dropped() -> bool:
            assert net.call_in(1, lambda: status_of(old_copy)) in (None, 503), "bravo's old copy answered"
            return local_node(b, node["id"]) is None and not (b.home / "nodes" / node["id"]).exists()
        wait_until(dropped, timeout=60, interval=0.2, what="bravo dropping its old copy and its folder")
        moved = wait_until(lambda: (v := local_node(taker, node["id"])) and v["ready"] and v, timeout=20,
                           what="the node serving on the taker")
        assert moved["peer_id"] == claimed["peer_id"]


def test_no_namespace_is_left_behind(home_network):
    names = set(os.listdir("/run/netns"))
    assert set(home_network.names) | {home_network.switch} <= names
    home_network.close()
    assert not (set(home_network.names) | {home_network.switch}) & set(os.listdir("/run/netns"))
