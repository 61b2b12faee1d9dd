"""A node's history through a real headless host: the API, the CLI's strip, kept across a
host restart, 0600, dropped with the node."""

from __future__ import annotations

import json
import os
import signal
import stat

from tests.support.headless import added, fast_settings, running_node
from tests.support.polling import wait_until


def history(host, node_id: str) -> dict:
    status, body = host.api("GET", f"/api/nodes/{node_id}/history")
    assert status == 200, body
    return body


def states(doc: dict) -> list[str]:
    return [span["state"] for span in doc["windows"][0]["spans"]]


def test_history_through_the_api_and_the_cli_across_a_host_restart(host_factory):
    host = host_factory(fast_settings()).start()
    node = added(host)
    node_id = node["id"]
    first = running_node(host, node_id)
    wait_until(lambda: host.node(node_id)["ready"], timeout=20, what="the node ready")
    os.kill(first["pid"], signal.SIGKILL)  # a crash: respawned, a restart
    wait_until(lambda: (n := host.node(node_id))["ready"] and n["pid"] != first["pid"], timeout=20,
               what="the node back")
    wait_until(lambda: history(host, node_id)["windows"][0]["restarts"] == 1, timeout=10, what="the restart")
    assert host.stop() == 0
    path = host.home / "node-history.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert node_id in json.loads(path.read_text())["nodes"]

    host.start()
    wait_until(lambda: host.node(node_id)["ready"], timeout=20, what="the node ready again")
    doc = wait_until(lambda: (d := history(host, node_id)) and states(d)[-1] == "up" and d, timeout=10,
                     what="up again after the restart")
    seen = states(doc)
    assert seen[0] in ("starting", "up") and "none" in seen  # the host's gap is unknown, not up or down
    assert doc["windows"][0]["restarts"] >= 1 and 0 < doc["windows"][0]["uptime_percent"] <= 100
    assert [w["name"] for w in doc["windows"]] == ["24h", "7d"]

    done = host.cli("node", "history", node_id)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # Seconds of history fill the last half-hour slice, which shows the worst state in it.
    # The crash's respawn is a restart; the start by the new host after its Quit is not (issue 39, item 12).
    assert lines[0].startswith("24 h |" + " " * 47 + "░|") and "% up, 1 restart" in lines[0], \
        "\n".join([lines[0], json.dumps(doc["windows"][0]["spans"]), path.read_text()[:3000]])
    assert lines[1] == " " * 6 + " " * 47 + "^"  # the restarts marked under their slice
    assert any(line.startswith("7 d") for line in lines) and "given up" in lines[-1]

    assert host.api("DELETE", f"/api/nodes/{node_id}")[0] == 200
    assert host.api("GET", f"/api/nodes/{node_id}/history")[0] == 404
    wait_until(lambda: node_id not in json.loads(path.read_text())["nodes"], timeout=10,
               what="the history dropped with the node")


def test_pause_all_and_its_resume_are_no_down_time_and_no_restart(host_factory):
    """Issue 39, item 12, through a real host: a resume after Pause all added a zero-length down
    and a restart, and a node's own start-up counted against its uptime (78 % for a 2 s old node)."""
    host = host_factory(fast_settings()).start()
    node_id = added(host)["id"]
    first = running_node(host, node_id)
    assert history(host, node_id)["windows"][0]["uptime_percent"] == 100.0, "a new node's start-up counted as down"
    status, body = host.api("POST", "/api/host/pause", {})
    assert status == 200, body
    wait_until(lambda: host.node(node_id)["status"] == "paused" and not host.node(node_id)["running"], timeout=20,
               what="paused by Pause all")
    status, body = host.api("POST", "/api/host/resume")
    assert status == 200, body
    running_node(host, node_id, not_pid=first["pid"])
    doc = wait_until(lambda: (d := history(host, node_id)) and states(d)[-1] == "up" and d, timeout=10,
                     what="up again in the history")
    day = doc["windows"][0]
    assert "down" not in states(doc), day["spans"]
    assert day["restarts"] == 0 and day["uptime_percent"] == 100.0, day
    host.stop()


def test_a_nodes_own_sleep_is_no_down_time_and_its_wake_no_restart(host_factory):
    """The reference node asks to sleep (its run.json, then exit 0): held from that exit on, not down."""
    import urllib.request
    from datetime import UTC, datetime, timedelta

    import psutil

    host = host_factory(fast_settings()).start()
    node_id = added(host)["id"]
    node = running_node(host, node_id)
    token = psutil.Process(node["pid"]).environ()["CADRE_HOST_TOKEN"]
    wake_at = (datetime.now(UTC) + timedelta(seconds=2)).isoformat().replace("+00:00", "Z")
    body = json.dumps({"state": "sleeping", "wake_at": wake_at, "reason": "nothing to do"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{node['api_port']}/host/run", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 202
    wait_until(lambda: host.node(node_id)["status"] == "sleeping", timeout=10, what="sleeping")
    running_node(host, node_id, not_pid=node["pid"])
    doc = wait_until(lambda: (d := history(host, node_id)) and states(d)[-1] == "up" and d, timeout=10,
                     what="up again in the history")
    assert "down" not in states(doc) and "paused" in states(doc), doc["windows"][0]["spans"]
    assert doc["windows"][0]["restarts"] == 0 and doc["windows"][0]["uptime_percent"] == 100.0, doc["windows"][0]
    host.stop()
