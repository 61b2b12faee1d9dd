"""Failover across three real headless hosts and their 3-member etcd cluster on 127.0.0.1.

A claimed node on bravo with failover on: every process of bravo (its host, its node, its etcd
member) is frozen with SIGSTOP, as a laptop shut asleep; alpha or charlie takes the node over
within the lease time + 5 s, the same peer id and claim, at a higher generation. Bravo
thawed never answers a request with its old copy (its deadline passed while frozen) and drops
it. Before charlie pairs, a two-computer fleet refuses `--failover on` in words.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request

import psutil
import pytest

from cadre_desktop.host.fleetstate.takeover import THIRD_COMPUTER
from tests.support.fleet_hosts import all_online, local_node, pair_by_api, running_hosts, self_id, store_ready, wait_state
from tests.support.headless import HeadlessHost, added, running_node
from tests.support.host_calls import claim
from tests.support.node_scan import node_processes
from tests.support.polling import wait_until

pytestmark = [pytest.mark.timeout(240), pytest.mark.skipif(os.name != "posix", reason="SIGSTOP")]

LEASE_MS = 3000


def processes_of(host: HeadlessHost) -> list[psutil.Process]:
    """The host's process, every process under it, and its nodes (found by their folder)."""
    assert host.proc is not None
    root = psutil.Process(host.proc.pid)
    found = {p.pid: p for p in [root, *root.children(recursive=True)]}
    for procs in node_processes(host.home).values():
        found.update({p.pid: p for p in procs})
    return list(found.values())


def signal_all(procs: list[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def answers(port: int) -> int | None:
    """The old copy's /status: its HTTP status, or None when it refuses, resets or says nothing."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=1.0) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, TimeoutError):
        return None


def test_a_frozen_computers_failover_node_serves_on_another_and_never_twice(tmp_path):
    with running_hosts(tmp_path, "alpha", "bravo", "charlie", fleet_lease_ms=LEASE_MS) as hosts:
        a, b, c = hosts
        ids = {h.home.name: self_id(h) for h in hosts}
        node = added(b, "Study")
        assert claim(running_node(b, node["id"]), "family")[0] == 200
        claimed = wait_until(lambda: (v := b.node(node["id"]))["status"] == "joined" and v["peer_id"] and v,
                             timeout=20, interval=0.1, what="the node claimed on bravo")
        pair_by_api(a, b)
        wait_state(b, ids["alpha"], "online", timeout=30)
        for h in (a, b):
            store_ready(h)  # a cluster of two, settled before the third member joins it
        # Two computers: refused in words, nothing changed.
        refused = b.cli("node", "set", node["id"], "--failover", "on")
        assert refused.returncode != 0 and THIRD_COMPUTER in refused.stderr + refused.stdout, refused
        pair_by_api(a, c)
        all_online(hosts, ids, timeout=30)
        for h in hosts:
            store_ready(h)
        turned = b.cli("node", "set", node["id"], "--failover", "on", "--json")
        assert turned.returncode == 0, turned.stderr
        def restarted() -> dict | None:
            v = b.node(node["id"])
            return v if v["ready"] and v["failover"] and v["generation"] and v["pid"] != claimed["pid"] else None
        held = wait_until(restarted, timeout=30, interval=0.2, what="the node restarted under its lease on bravo")
        for h in (a, c):
            replica = h.home / "replicas" / node["id"] / "replica.bin"
            wait_until(replica.is_file, timeout=30, interval=0.2, what=f"the replica on {h.home.name}")
            assert replica.stat().st_mode & 0o077 == 0 and b"family" not in replica.read_bytes()  # 0600, encrypted
        # Bravo shut asleep: its host, its node and its etcd member frozen.
        frozen = processes_of(b)
        assert len(frozen) >= 3, frozen
        signal_all(frozen, signal.SIGSTOP)
        froze_at = time.monotonic()
        try:
            def served_elsewhere() -> tuple[HeadlessHost, dict] | None:
                for h in (a, c):
                    v = local_node(h, node["id"])
                    if v and v["ready"] and v["peer_id"] == claimed["peer_id"]:
                        return h, v
                return None
            taker, there = wait_until(served_elsewhere, timeout=LEASE_MS / 1000 + 30, interval=0.2,
                                      what="the node serving on alpha or charlie")
            took_s = time.monotonic() - froze_at
            assert there["generation"] > held["generation"], (there, held)
            assert there["cadre"] == "family" and there["status"] in ("joined", "joining")
            print(f"failover: served on {taker.home.name} {took_s:.1f} s after bravo froze at"
                  f" {time.strftime('%H:%M:%S', time.localtime(time.time() - took_s))} (lease {LEASE_MS} ms)")
            assert took_s < LEASE_MS / 1000 + 5, took_s  # the issue: within the lease time + 5 s
        finally:
            signal_all(frozen, signal.SIGCONT)
        # Bravo thawed: its old copy never answers, and its host drops it.
        port = held["api_port"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = answers(port)
            assert got in (None, 503), got
            gone = local_node(b, node["id"]) is None and not (b.home / "nodes" / node["id"]).exists()
            if gone:
                break
            time.sleep(0.1)
        assert local_node(b, node["id"]) is None, "bravo kept its copy"
        assert answers(port) in (None, 503)
        assert running_node(taker, node["id"])["peer_id"] == claimed["peer_id"]
