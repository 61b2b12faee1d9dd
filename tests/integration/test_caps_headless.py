"""Caps through the whole host, on this computer's cgroups: the settings' memory cap stops a
node that allocates past it, its view and `node show` say so and how the cap is held,
`node set` changes it, and Remove and Quit leave nothing in the cgroup tree.

Skipped, with the reason, where no cgroup memory controller is writable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cadre_desktop.host.local.limits import caps
from tests.support.borrower import borrow, create_grant, free_lend_port
from tests.support.headless import added, fast_settings
from tests.support.polling import wait_until
from tests.support.processes import THIS_OS

CAP_NODES = str(Path(__file__).resolve().parents[1] / "support" / "cap_nodes.py")
WORDS = "stopped by its memory cap of 64 MB"


def groups_of(home: Path) -> tuple[caps.Way, str]:
    home_id = json.loads((home / "hosted-nodes.json").read_text())["home_id"]
    way = caps.choose(THIS_OS, home_id, scope_address=lambda: None)
    assert way.tree is not None
    return way, home_id


def test_a_hosted_node_is_held_to_its_memory_cap_and_leaves_no_cgroup(host_factory, tmp_path):
    here = caps.choose(THIS_OS, "probe", scope_address=lambda: None)
    if here.tree is None or "memory" not in here.tree.controllers:
        pytest.skip(f"no writable cgroup memory controller here: {caps.describe(here)['how']}")
    host = host_factory(fast_settings(node_command=[sys.executable, CAP_NODES, "hog"], node_memory_mb=64,
                                      respawn_max_attempts=50, respawn_backoff_max_ms=500, node_low_priority=True))
    host.start()
    node = added(host, "hog")
    seen = wait_until(lambda: (n := host.node(node["id"]))["last_exit"] == WORDS and n, timeout=60,
                      what="the memory cap's words")
    assert seen["caps"]["memory_mb"] == 64 and seen["caps"]["enforced"] is True
    assert seen["caps"]["how"] == here.how() and seen["caps"]["low_priority"] is True
    done = host.cli("node", "show", node["id"])
    assert done.returncode == 0 and "memory 64 MB" in done.stdout, done.stderr

    done = host.cli("node", "set", node["id"], "--memory", "96", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["caps"]["memory_mb"] == 96
    done = host.cli("node", "set", node["id"], "--memory", "16")
    assert done.returncode == 1 and "memory_mb" in done.stderr
    assert host.node(node["id"])["caps"]["memory_mb"] == 96  # nothing changed

    way, _home_id = groups_of(host.home)
    tree = way.tree
    assert tree is not None
    wait_until(lambda: any(d.exists() for d in tree.node_dirs(node["id"]).values()), what="its cgroup")
    done = host.cli("node", "remove", "--yes", node["id"])
    assert done.returncode == 0, done.stderr
    assert not any(d.exists() for d in tree.node_dirs(node["id"]).values())

    second = added(host, "hog two")
    wait_until(lambda: host.node(second["id"])["last_exit"] == WORDS, timeout=60, what="the second node's kill")
    assert host.stop() == 0  # a Quit that stops the nodes
    assert not any((root / tree.family).exists() for root in tree.roots.values())


def test_a_lent_node_gets_the_hosts_caps_and_its_view_says_so(host_factory, tmp_path):
    here = caps.choose(THIS_OS, "probe", scope_address=lambda: None)
    if here.tree is None or "cpu" not in here.tree.controllers:
        pytest.skip(f"no writable cgroup cpu controller here: {caps.describe(here)['how']}")
    host = host_factory(fast_settings(lend_port=free_lend_port(), node_cpu_percent=50)).start()
    grant = create_grant(host, label="friends", max_nodes=1)
    result = borrow(grant["link"], "friends", tmp_path / "owner.json")
    assert result.returncode == 0, result.stderr
    lent = json.loads(result.stdout)["id"]

    def running() -> dict | None:
        status, view = host.api("GET", f"/api/donations/{lent}")
        return view if status == 200 and view["running"] else None

    view = wait_until(running, timeout=30, what="the lent node running")
    assert view["caps"] == {"cpu_percent": 50, "memory_mb": None, "low_priority": False, "enforced": True,
                            "how": here.how()}
    way, _home_id = groups_of(host.home)
    assert way.tree is not None
    group = way.tree.node_dirs(lent)["cpu"]
    assert str(view["pid"]) in (group / "cgroup.procs").read_text().split()
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "50000"
    assert host.stop() == 0
    assert not any((root / way.tree.family).exists() for root in way.tree.roots.values())
