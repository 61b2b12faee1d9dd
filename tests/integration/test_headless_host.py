"""The real headless host supervising real reference nodes on 127.0.0.1.

Keyring: a real Secret Service (gnome-keyring in a private D-Bus session).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import psutil

from tests.support.claim_link import claim
from tests.support.headless import added, fast_settings, running_node
from tests.support.polling import wait_until
from tests.support.secret_items import entry_name


def post_json(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def keyring_get(env: dict, user: str) -> str | None:
    code = f"import keyring; print(keyring.get_password('cadre-desktop', {user!r}) or '')"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    return out or None


def test_add_then_claim_from_the_qr_url_then_joined(host_factory):
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    assert node["status"] == "unclaimed"
    assert node["claim_url"].startswith(f"http://127.0.0.1:{node['api_port']}/claim?node={node['id']}#")
    status, body = claim(node["claim_url"], "family")
    assert status == 200, body
    joined = wait_until(lambda: (n := host.node(node["id"]))["status"] == "joined" and n, timeout=15,
                        what="joined")
    assert joined["cadre"] == "family" and joined["claim_url"] is None
    assert joined["peer_id"]
    assert host.stop() == 0


def test_a_claim_shows_within_two_seconds_with_the_default_probe_interval(host_factory):
    """Issue 26: the probe waits on an unclaimed node (GET /status?wait=&since=) instead of asking it
    every two seconds; the claim still reaches the host's view at once, end to end."""
    host = host_factory(fast_settings(probe_interval_ms=5000)).start()
    node = running_node(host, added(host)["id"])
    assert claim(node["claim_url"], "family")[0] == 200
    claimed = time.monotonic()
    wait_until(lambda: host.node(node["id"])["status"] == "joined", timeout=15, what="joined")
    assert time.monotonic() - claimed < 2.0
    assert host.stop() == 0


def test_sigkilled_node_comes_back_as_the_same_node(host_factory):
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    assert claim(node["claim_url"], "family")[0] == 200
    before = wait_until(lambda: (n := host.node(node["id"]))["peer_id"] and n["status"] == "joined" and n,
                        timeout=15, what="joined with peer id")
    os.kill(before["pid"], signal.SIGKILL)
    after = running_node(host, node["id"], not_pid=before["pid"])
    assert after["peer_id"] == before["peer_id"]
    assert after["attempts"] == 1
    wait_until(lambda: host.node(node["id"])["status"] == "joined", what="still joined")
    # The respawned node still refuses a rival cadre, even with the right secret.
    parts = urllib.parse.urlsplit(node["claim_url"])

    def rival():
        try:
            return post_json(f"http://{parts.netloc}/claim", {"secret": parts.fragment, "cadre": "rivals"})
        except OSError:
            return None
    status, body = wait_until(rival, what="respawned node answering")
    assert status == 409 and body["error"]["code"] == "already-claimed"
    host.stop()


def test_node_that_always_exits_is_given_up_on_then_retried(host_factory):
    crash = [sys.executable, "-c", "import sys; print('node exploded: bad config', flush=True); sys.exit(1)"]
    host = host_factory(fast_settings(node_command=crash)).start()
    node = added(host)
    failed = wait_until(lambda: (n := host.node(node["id"]))["status"] == "error" and n, timeout=20,
                        what="give-up")
    assert "gave up after 3 attempts: exited with code 1: node exploded: bad config" in failed["last_error"]
    assert "node exploded: bad config" in failed["last_error"]
    assert not failed["running"]
    status, body = host.api("POST", f"/api/nodes/{node['id']}/retry")
    assert status == 200, body
    assert body["status"] == "unclaimed" and body["attempts"] == 1
    wait_until(lambda: host.node(node["id"])["status"] == "error", timeout=20, what="second give-up")
    host.stop()


def test_an_exit_that_retrying_cannot_fix_gives_up_at_once_with_the_nodes_line(host_factory):
    crash = [sys.executable, "-c",
             "import sys; print('cadre-node: error: CADRE_API_PORT is not a port', file=sys.stderr); sys.exit(2)"]
    host = host_factory(fast_settings(node_command=crash)).start()
    node = added(host)
    failed = wait_until(lambda: (n := host.node(node["id"]))["status"] == "error" and n, timeout=20,
                        what="give-up")
    assert failed["last_error"].startswith(
        "gave up: exited with code 2: cadre-node: error: CADRE_API_PORT is not a port")
    assert failed["attempts"] == 0 and failed["last_decision"]["decision"] == "give-up"
    host.stop()


def test_sigkilled_host_restarts_and_reattaches_without_respawning(host_factory):
    host = host_factory(fast_settings()).start()
    ids = [added(host, f"N{i}")["id"] for i in range(2)]
    pids = {i: running_node(host, i)["pid"] for i in ids}
    host.kill()
    assert all(psutil.pid_exists(p) for p in pids.values())
    again = host_factory(home=host.home).start()
    for node_id in ids:
        n = again.node(node_id)
        assert n["running"] and n["pid"] == pids[node_id] and n["attempts"] == 0
    # A few probe rounds later nothing was respawned either.
    wait_until(lambda: all(again.node(i).get("peer_id") for i in ids), what="probed after re-attach")
    for node_id in ids:
        assert again.node(node_id)["pid"] == pids[node_id]
        log = (again.home / "logs" / f"node-{node_id}.log").read_text()
        assert log.count("--- cadre-desktop: starting node") == 1
    again.stop()
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids.values())


def test_remove_ends_the_process_and_deletes_folder_and_keyring_entry(host_factory, secret_service):
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    work = host.home / "nodes" / node["id"]
    assert work.is_dir()
    assert keyring_get(secret_service, entry_name(host.home, node['id']))
    status, body = host.api("DELETE", f"/api/nodes/{node['id']}")
    assert status == 200 and body["existed"] is True
    assert host.api("GET", f"/api/nodes/{node['id']}")[0] == 404
    assert not work.exists()
    assert not psutil.pid_exists(node["pid"])
    assert keyring_get(secret_service, entry_name(host.home, node['id'])) is None
    status, body = host.api("DELETE", f"/api/nodes/{node['id']}")
    assert status == 200 and body["existed"] is False
    host.stop()


def test_second_host_on_the_same_home_exits_3_naming_the_first(host_factory):
    first = host_factory(fast_settings()).start()
    second = host_factory(home=first.home).start(wait=False)
    assert second.proc.wait(timeout=30) == 3
    assert f"pid {first.proc.pid}" in second.stderr()
    assert first.proc.poll() is None
    first.stop()


def test_clean_stop_leaves_no_node_process_and_a_restart_counts_no_attempt(host_factory):
    host = host_factory(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    assert host.stop() == 0
    assert not psutil.pid_exists(node["pid"])
    assert not (host.home / "control.json").exists()
    again = host_factory(home=host.home).start()
    back = running_node(again, node["id"], not_pid=node["pid"])
    assert back["attempts"] == 0 and back["status"] == "unclaimed"
    again.stop()
