"""A crashing node through a real headless host: while it backs off its view's last error is the
crash's words (the Reason column, `node list`), and host.log numbers each start by the attempt the
views show (issue 39, item 13)."""

from __future__ import annotations

import re
import sys

from tests.support.headless import fast_settings
from tests.support.polling import wait_until

CRASHING = [sys.executable, "-c", "import sys; print('cadre-node: error: the disk is full', file=sys.stderr); sys.exit(1)"]


def test_a_node_backing_off_says_its_crash_and_host_log_numbers_its_attempts_as_the_views(host_factory):
    host = host_factory(fast_settings(node_command=CRASHING, respawn_backoff_base_ms=2000,
                                      respawn_backoff_max_ms=4000, respawn_max_attempts=5)).start()
    status, node = host.api("POST", "/api/nodes", {"name": "Kitchen"})
    assert status == 201, node
    backing = wait_until(lambda: (n := host.node(node["id"]))["next_retry_at"] and not n["running"] and n, timeout=30,
                         what="the node backing off after a crash")
    assert backing["last_error"] and "the disk is full" in backing["last_error"], backing
    listed = host.cli("node", "list")
    assert listed.returncode == 0 and "the disk is full" in listed.stdout, listed.stdout
    wait_until(lambda: host.node(node["id"])["attempts"] >= 2, timeout=30, what="a second attempt")
    log = (host.home / "logs" / "host.log").read_text()
    started = [int(n) for n in re.findall(rf"node {node['id']} started \(attempt (\d+)\)", log)]
    assert started and started == list(range(1, len(started) + 1)), started
    assert max(started) <= host.node(node["id"])["attempts"], (started, host.node(node["id"]))
    host.stop()
