"""The CLI, in subprocesses, driving a real headless host that runs real reference nodes.

Keyring: a real Secret Service (gnome-keyring in a private D-Bus session).
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import threading

import pytest

from cadre_desktop import __version__
from tests.support.headless import HeadlessHost, fast_settings
from tests.support.polling import wait_until
from tests.support.secret_items import entry_name


@pytest.fixture
def keyring_env(secret_service):
    return secret_service


def keyring_get(env: dict, user: str) -> str | None:
    import os
    code = f"import keyring; print(keyring.get_password('cadre-desktop', {user!r}) or '')"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    return out or None


@pytest.fixture
def host(tmp_path, keyring_env):
    h = HeadlessHost(tmp_path / "home", keyring_env, fast_settings())
    h.start()
    yield h
    assert h.proc is not None
    if h.proc.poll() is None:
        h.stop()


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr}"
    return done.stdout


def test_add_list_show_qr_remove_through_the_cli(host, keyring_env, tmp_path):
    node = json.loads(ok(host.cli("node", "add", "--name", "Kitchen", "--json")))
    node_id = node["id"]
    assert node["name"] == "Kitchen"

    listed = wait_until(lambda: [n for n in json.loads(ok(host.cli("node", "list", "--json")))["nodes"]
                                 if n["id"] == node_id and n["status"] == "unclaimed" and n["running"]],
                        timeout=20, interval=0.1, what="the node unclaimed and running")[0]
    url = listed["claim_url"]
    assert url.startswith(f"http://127.0.0.1:{listed['api_port']}/claim?node={node_id}#")
    secret = url.split("#", 1)[1]
    assert keyring_get(keyring_env, entry_name(host.home, node_id)) == secret

    table = ok(host.cli("node", "list"))
    assert "Kitchen" in table and "unclaimed" in table and secret not in table
    shown = dict(line.split(":", 1) for line in ok(host.cli("node", "show", node_id)).splitlines())
    assert shown["claim_url"].strip() == url and shown["status"].strip() == "unclaimed"

    if shutil.which("zbarimg"):
        png = tmp_path / "claim.png"
        ok(host.cli("node", "qr", node_id, "--png", str(png)))
        decoded = subprocess.run(["zbarimg", "--quiet", "--raw", str(png)], capture_output=True, text=True, timeout=20)
        assert decoded.stdout.strip() == url

    assert host.cli("node", "logs", node_id, "-n", "5").returncode == 0

    refused = host.cli("node", "remove", node_id, input="")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert "Removed" in ok(host.cli("node", "remove", node_id, "--yes"))
    assert json.loads(ok(host.cli("node", "list", "--json"))) == {"nodes": []}
    missing = host.cli("node", "show", node_id)
    assert missing.returncode == 1 and missing.stderr.startswith("cadre-desktop: ")
    assert keyring_get(keyring_env, entry_name(host.home, node_id)) is None


def test_second_host_on_the_same_home_exits_3_naming_the_pid(host):
    second = subprocess.run([sys.executable, "-m", "cadre_desktop", "--headless"], env=host.env,
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 3
    assert str(host.proc.pid) in second.stderr
    assert host.control["pid"] == host.proc.pid  # the first host's control.json is left alone
    assert host.api("GET", "/api/host") == (200, {"pid": host.proc.pid, "version": __version__,
                                                  "home": str(host.home), "pause": {"paused": False}})


def test_stopped_host_leaves_no_control_file_and_the_cli_exits_3(host):
    assert host.stop() == 0
    assert not (host.home / "control.json").exists()
    done = host.cli("node", "list")
    assert done.returncode == 3 and "--headless" in done.stderr


def test_watch_prints_events_as_they_happen(host):
    watcher = subprocess.Popen([sys.executable, "-m", "cadre_desktop", "node", "watch", "--json"],
                               env=host.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    out, err = watcher.stdout, watcher.stderr
    assert out is not None and err is not None

    def pump() -> None:
        for line in out:
            lines.put(line)
    threading.Thread(target=pump, daemon=True).start()
    try:
        assert "Watching" in err.readline()  # connected: nothing after this is missed
        node = json.loads(ok(host.cli("node", "add", "--json")))
        event = json.loads(lines.get(timeout=20))
        assert (event["event"], event["id"]) == ("added", node["id"])
        assert event["node"]["id"] == node["id"]
    finally:
        watcher.terminate()
        watcher.wait(10)


def test_doctor_passes_with_the_secret_service_and_the_reference_node(tmp_path, keyring_env):
    h = HeadlessHost(tmp_path / "doctor-home", keyring_env, fast_settings())
    done = h.cli("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("ok") and "keyring:" in line for line in lines)
    assert any(line.startswith("ok") and "node program:" in line for line in lines)
    assert any("host:" in line and "no host is running" in line for line in lines)
