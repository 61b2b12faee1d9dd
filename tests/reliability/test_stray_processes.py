"""A node whose wrapper dies never leaves its real node behind.

`node_command` is a shell script that runs the node as its child. SIGKILLing
the wrapper (as the OOM killer would) used to leave the real node running in
the wrapper's group, holding the work folder's lock and the ports, so every
respawn failed until the host gave up, and quit left it running. Here the
wrapper of one of two nodes is SIGKILLed 20 times, each time once the node
answers again; afterwards each record has exactly one real node process (the
child of the wrapper the host tracks), nothing was given up on, and after a
clean quit no node process and no wrapper runs.
"""

from __future__ import annotations

import os
import signal

import psutil

from tests.support.headless import FLAKY_NODE, REPO, host_settings
from tests.support.host_calls import answered, running
from tests.support.node_scan import node_processes
from tests.support.polling import wait_until

WRAPPER = ["/bin/sh", str(REPO / "tests" / "support" / "wrapper_node.sh"), *FLAKY_NODE]
KILLS = 20


def real_nodes(home) -> dict[str, list[psutil.Process]]:
    """Per node id, its live processes that are the node itself (not the wrapper)."""
    found: dict[str, list[psutil.Process]] = {}
    for node_id, procs in node_processes(home).items():
        for proc in procs:
            try:
                if any("flaky_node.py" in part for part in proc.cmdline()[:3]):
                    found.setdefault(node_id, []).append(proc)
            except psutil.Error:
                continue
    return found


def log_writers(home) -> list[psutil.Process]:
    """The live log pumps or keepers writing into `home`'s logs (they carry no CADRE_ variables)."""
    logs = str(home / "logs")
    found = []
    for proc in psutil.process_iter():
        try:
            cmd = proc.cmdline()
            if proc.status() != psutil.STATUS_ZOMBIE and any(part.startswith(logs) for part in cmd) and any(
                    "logpump" in part or "logkeeper" in part for part in cmd):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_sigkilled_wrappers_leave_exactly_one_node_per_record_and_none_after_quit(hosts, rng):
    host = hosts(host_settings(rng, node_command=WRAPPER, respawn_max_attempts=40,
                               respawn_backoff_max_ms=200)).start()
    ids = [answered(host, "POST", "/api/nodes", {"name": f"wrapped {i}"})[1]["id"] for i in range(2)]
    views = {node_id: running(host, node_id) for node_id in ids}
    for kill in range(KILLS):
        node_id = ids[kill % 2]
        wrapper = views[node_id]["pid"]
        assert psutil.Process(wrapper).cmdline()[0] == "/bin/sh", "the host tracks the wrapper"
        os.kill(wrapper, signal.SIGKILL)
        views[node_id] = running(host, node_id, not_pid=wrapper)
        wait_until(lambda: len(real_nodes(host.home).get(node_id, [])) == 1, timeout=10,
                   what=f"one real node process for {node_id} after kill {kill + 1}")
    nodes = real_nodes(host.home)
    for node_id in ids:
        view = answered(host, "GET", f"/api/nodes/{node_id}")[1]
        assert view["status"] == "unclaimed" and view["running"], view
        assert len(nodes[node_id]) == 1, f"{node_id}: {[p.pid for p in nodes[node_id]]}"
        assert nodes[node_id][0].ppid() == view["pid"], "the real node is not the tracked wrapper's child"
    writers = log_writers(host.home)
    assert len(writers) == 1, f"one log keeper for the home, no pump per node: {[p.pid for p in writers]}"
    assert host.stop() == 0
    assert not node_processes(host.home), "quit left node processes or wrappers running"
    wait_until(lambda: not log_writers(host.home), timeout=10, what="the log keeper's end after the quit")


def standbys(home) -> list[psutil.Process]:
    """Live standbys (and the nodes they became) started for `home`."""
    nodes = str(home / "nodes")
    found = []
    for proc in psutil.process_iter():
        try:
            if (proc.environ().get("CADRE_STANDBY") == "1" and proc.cwd().startswith(nodes)
                    and proc.status() != psutil.STATUS_ZOMBIE):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_quit_with_warm_starts_leaves_no_node_standby_or_log_keeper(hosts, rng):
    host = hosts(host_settings(rng, warm_standby=True, respawn_max_attempts=10)).start()
    ids = [answered(host, "POST", "/api/nodes", {"name": f"warm {i}"})[1]["id"] for i in range(2)]
    views = {node_id: running(host, node_id) for node_id in ids}
    wait_until(lambda: any(p.cwd() == str(host.home / "nodes") for p in standbys(host.home)), timeout=15,
               what="a standby waiting")
    os.kill(views[ids[0]]["pid"], signal.SIGKILL)
    respawned = running(host, ids[0], not_pid=views[ids[0]]["pid"])
    assert psutil.Process(respawned["pid"]).environ().get("CADRE_STANDBY") == "1", "the respawn started cold"
    assert host.stop() == 0
    assert not node_processes(host.home), "quit left node processes running"
    assert not standbys(host.home), "quit left a standby running"
    wait_until(lambda: not log_writers(host.home), timeout=10, what="the log keeper's end after the quit")
