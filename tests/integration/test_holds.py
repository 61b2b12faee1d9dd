"""Holds with the real headless host and the reference node: a person's pause outlives a host
restart and spends nothing; a node that asks to sleep (its run.json) is not restarted before its
wake_at, and is ready again after it."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import psutil

from tests.support.headless import added, fast_settings, running_node
from tests.support.polling import wait_until
from tests.support.processes import ended as gone
from tests.support.secret_items import entry_name, secret_items


def node_processes(home) -> list[psutil.Process]:
    """Every live process started for a node of this home (found by its CADRE_NODE_DIR)."""
    found = []
    for proc in psutil.process_iter(["environ"]):
        try:
            env = proc.info["environ"] or {}
            if env.get("CADRE_NODE_DIR", "").startswith(str(home)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_pause_survives_a_host_restart_spends_nothing_and_resume_makes_it_ready(host_factory):
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    status, paused = host.api("POST", f"/api/nodes/{node['id']}/pause", {})
    assert status == 200, paused
    assert paused["status"] == "paused" and paused["held_by"] == "person" and not paused["running"]
    assert gone(node["pid"]) and node_processes(host.home) == []
    assert host.stop() == 0

    again = host_factory(home=host.home).start()
    wait_until(lambda: again.node(node["id"])["last_decision"], timeout=15, what="the start-up pass")
    held = again.node(node["id"])
    assert held["status"] == "paused" and not held["running"] and held["attempts"] == 0
    assert node_processes(again.home) == []
    status, resumed = again.api("POST", f"/api/nodes/{node['id']}/resume")
    assert status == 200, resumed
    ready = running_node(again, node["id"])
    assert ready["status"] == "unclaimed" and ready["attempts"] == 0 and ready["held_by"] is None
    again.stop()


def ask_to_sleep(node: dict, pid: int, wake_at: datetime) -> int:
    """POST /host/run to the reference node with the token its host gave it (read from its environment)."""
    token = psutil.Process(pid).environ()["CADRE_HOST_TOKEN"]
    body = {"state": "sleeping", "wake_at": wake_at.isoformat().replace("+00:00", "Z"), "reason": "nothing until then"}
    req = urllib.request.Request(f"http://127.0.0.1:{node['api_port']}/host/run", data=json.dumps(body).encode(),
                                 method="POST", headers={"Authorization": f"Bearer {token}",
                                                         "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status


def test_the_reference_node_asked_to_sleep_3_s_is_not_restarted_early_and_is_ready_after(host_factory):
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    wake_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    assert ask_to_sleep(node, node["pid"], wake_at) == 202
    sleeping = wait_until(lambda: (n := host.node(node["id"]))["status"] == "sleeping" and n, timeout=10,
                          what="sleeping")
    assert sleeping["held_by"] == "node" and sleeping["hold_reason"] == "nothing until then"
    assert gone(node["pid"])
    # Until its wake_at, no process of it runs (polled for the whole sleep, not slept through).
    while datetime.now(UTC) < wake_at - timedelta(seconds=0.3):
        n = host.node(node["id"])
        assert n["status"] == "sleeping" and not n["running"], n
        assert node_processes(host.home) == []
    back = running_node(host, node["id"], not_pid=node["pid"])
    assert datetime.now(UTC) >= wake_at - timedelta(seconds=0.05)
    assert back["status"] == "unclaimed" and back["attempts"] == 0 and back["wake_at"] is None
    assert not (host.home / "nodes" / node["id"] / "run.json").exists()
    host.stop()


def test_a_quit_leaves_an_orphan_running_and_remove_reclaims_it_and_deletes_its_data(host_factory, secret_service):
    """Seed 000: "Run `node remove <id>` to stop it and delete its data." Remove of an orphan's
    id stopped it and deleted nothing (issue 39, item 18): its folder, log and keyring entries go."""
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    secret_name = entry_name(host.home, node["id"])
    assert secret_name in secret_items(secret_service)
    host.kill()  # the child outlives its host ...
    records = host.home / "hosted-nodes.json"
    doc = json.loads(records.read_text())
    del doc["nodes"][node["id"]]  # ... and no record names it any more (a records file restored from a backup)
    records.write_text(json.dumps(doc))
    again = host_factory(home=host.home).start()
    assert again.api("GET", f"/api/nodes/{node['id']}")[0] == 404
    assert again.stop() == 0  # a Quit that stops the nodes
    assert not gone(node["pid"]), "the orphan was stopped at Quit"
    assert again.stderr_path.read_text().count("is an orphan no record names; it is left running") == 1

    third = host_factory(home=host.home).start()
    log_path = host.home / "logs" / f"node-{node['id']}.log"
    assert (host.home / "nodes" / node["id"]).is_dir() and log_path.exists()
    status, body = third.api("DELETE", f"/api/nodes/{node['id']}")
    assert status == 200 and body == {"removed": node["id"], "existed": False, "orphan_pids": [node["pid"]]}
    wait_until(lambda: gone(node["pid"]), timeout=10, what="the orphan stopped")
    assert not (host.home / "nodes" / node["id"]).exists(), "the orphan's work folder was kept"
    assert not log_path.exists(), "the orphan's log was kept"
    assert secret_name not in secret_items(secret_service), "the orphan's claim secret was kept"
    third.stop()
