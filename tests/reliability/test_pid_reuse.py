"""Pid reuse: a handle whose pid now belongs to an unrelated process is never adopted or signalled.

The test starts a bystander program (in a session of its own, so its pid is
also its group id) and forges a home whose state.json names the bystander's pid
as a node's child, with an identity that is not the bystander's: another start
time (the pid was reused), another boot, or an identity never read. The host
must start a new child for the node, and neither start-up, nor Restart, nor
Remove, nor a clean stop may signal the bystander. A control run with the
bystander's true identity shows the harness would see it if they did.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.seam import for_this_os
from tests.support.headless import host_settings
from tests.support.host_calls import answered, running
from tests.support.polling import wait_until
from tests.support.secret_items import store_secret

BYSTANDER = Path(__file__).resolve().parents[1] / "support" / "bystander.py"
STAMP = "2026-01-01T00:00:00.000Z"


@pytest.fixture
def bystander(tmp_path):
    folder = tmp_path / "bystander"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, str(BYSTANDER), str(folder)], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: (folder / "ready").exists(), timeout=10, what="the bystander to start")
    proc.folder = folder  # type: ignore[attr-defined]  # signals_seen finds the bystander's folder on it
    yield proc
    proc.kill()
    proc.wait(5)


def signals_seen(bystander) -> list[str]:
    path = bystander.folder / "signals.txt"
    return path.read_text().split() if path.exists() else []


def forge_home(home: Path, settings: dict, pid: int, identity: procs.Identity, keyring_env: dict) -> str:
    node_id = "nforged1"
    handle = f"{node_id}.0badf00d"
    api, p2p = settings["port_range"][0] + 10, settings["port_range"][0] + 11
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps(settings))
    (home / "hosted-nodes.json").write_text(json.dumps({"version": 1, "nodes": {node_id: {
        "name": "Forged", "status": "unclaimed", "mode": "claim", "handle": handle, "api_port": api,
        "p2p_port": p2p, "created_at": STAMP, "updated_at": STAMP}}}))
    (home / "state.json").write_text(json.dumps({"version": 1, "handles": {handle: {
        "node_id": node_id, "pid": pid, "start_time": identity.start_time, "boot_id": identity.boot_id,
        "api_port": api, "p2p_port": p2p, "started_at": STAMP}}}))
    store_secret(keyring_env, f"{node_id}/claim-secret", secrets.token_urlsafe(32))
    return node_id


def forged_identity(real: procs.Identity, how: str) -> procs.Identity:
    if how == "pid reused by a later process":
        return procs.Identity(str(int(real.start_time) - 100), real.boot_id)
    if how == "same start time in another boot":
        return procs.Identity(real.start_time, "00000000-0000-0000-0000-000000000000")
    if how == "identity never read":
        return procs.Identity("unknown", real.boot_id)
    return real  # the control: this really is "our child"


@pytest.mark.parametrize("how", ["pid reused by a later process", "same start time in another boot",
                                 "identity never read"])
def test_handle_with_a_reused_pid_is_never_adopted_nor_signalled(tmp_path, hosts, rng, secret_service,
                                                                   bystander, how):
    settings = host_settings(rng, stop_timeout_ms=1000)
    real = for_this_os().read_identity(bystander.pid)
    assert real is not None  # the bystander runs
    node_id = forge_home(tmp_path / "home", settings, bystander.pid, forged_identity(real, how), secret_service)
    host = hosts(home=tmp_path / "home").start()
    view = running(host, node_id)
    assert view["pid"] != bystander.pid, "the host adopted an unrelated process as its child"
    state = json.loads((host.home / "state.json").read_text())
    assert bystander.pid not in [row["pid"] for row in state["handles"].values()]
    # Every path that signals a child: restart, remove, and stopping the host with a node.
    assert answered(host, "POST", f"/api/nodes/{node_id}/restart")[0] == 200
    assert answered(host, "DELETE", f"/api/nodes/{node_id}")[0] == 200
    assert answered(host, "POST", "/api/nodes", {})[0] == 201
    assert host.stop() == 0
    assert signals_seen(bystander) == []
    assert psutil.Process(bystander.pid).status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)


def test_control_a_handle_with_the_true_identity_is_adopted_and_signalled(tmp_path, hosts, rng,
                                                                           secret_service, bystander):
    """Not a product rule so much as proof that the test above would notice an adoption."""
    settings = host_settings(rng, stop_timeout_ms=1000)
    identity = for_this_os().read_identity(bystander.pid)
    assert identity is not None  # the bystander runs
    node_id = forge_home(tmp_path / "home", settings, bystander.pid, identity, secret_service)
    host = hosts(home=tmp_path / "home").start()
    assert answered(host, "GET", f"/api/nodes/{node_id}")[1]["pid"] == bystander.pid
    assert host.stop() == 0
    assert "SIGTERM" in signals_seen(bystander)
