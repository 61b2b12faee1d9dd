"""Pause all with the real headless host and the reference node: every node stops and spends
nothing, the pause (and the nodes' holds) outlive a restart of the host, a pause for a while
ends by itself, and `resume` brings every node back; `conditions` answers with no sources."""

from __future__ import annotations

import json
import os

from tests.support.headless import added, fast_settings, running_node
from tests.support.polling import wait_until
from tests.support.processes import ended as gone


def test_pause_all_survives_a_restart_and_resume_brings_every_node_back(host_factory):
    host = host_factory(fast_settings()).start()
    nodes = [running_node(host, added(host, name)["id"]) for name in ("one", "two")]
    done = host.cli("pause")
    assert done.returncode == 0 and "paused until you resume" in done.stdout, done.stderr
    for node in nodes:
        held = host.node(node["id"])
        assert held["status"] == "paused" and held["held_by"] == "person" and not held["running"]
        assert held["hold_reason"] == "paused from the tray (Pause all)"
        assert gone(node["pid"])
    pause_file = host.home / "host-pause.json"
    assert os.stat(pause_file).st_mode & 0o777 == 0o600 and json.loads(pause_file.read_text())["paused"] is True
    assert host.stop() == 0

    again = host_factory(home=host.home).start()
    wait_until(lambda: again.node(nodes[0]["id"])["last_decision"], timeout=15, what="the start-up pass")
    status, info = again.api("GET", "/api/host")
    assert status == 200 and info["pause"]["paused"] is True
    for node in nodes:
        held = again.node(node["id"])
        assert held["status"] == "paused" and not held["running"] and held["attempts"] == 0
    resumed = again.cli("resume")
    assert resumed.returncode == 0, resumed.stderr
    for node in nodes:
        ready = running_node(again, node["id"])
        assert ready["attempts"] == 0 and ready["held_by"] is None
    conditions = again.cli("conditions", "--json")
    report = json.loads(conditions.stdout)
    assert report["verdict"]["run"] is True and report["pause"] == {"paused": False}
    assert {c["name"]: c["sees"] for c in report["conditions"]}["on_battery"] in ("unknown", "on mains power",
                                                                                 "on battery")
    again.stop()


def test_a_pause_for_a_while_ends_by_itself(host_factory):
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    status, pause = host.api("POST", "/api/host/pause", {"for_ms": 2000})
    assert status == 200 and pause["until"], pause
    assert host.node(node["id"])["status"] == "sleeping"
    back = wait_until(lambda: (n := host.node(node["id"]))["running"] and n["status"] == "unclaimed" and n,
                      timeout=20, what="the node back after the pause")
    assert back["held_by"] is None and back["pid"] != node["pid"]
    status, info = host.api("GET", "/api/host")
    assert info["pause"] == {"paused": False}
    host.stop()
