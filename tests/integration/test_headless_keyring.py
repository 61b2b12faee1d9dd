"""`./scripts/run --headless` on a box with no Secret Service (no session bus at all): with
GNOME Keyring chosen, the host runs in a D-Bus session of its own whose keyring, unlocked by
the password given, keeps a secret; the same password opens the same keyring at the next start,
another finds it locked. Real dbus-run-session and gnome-keyring-daemon; the host is a stand-in
that runs doctor's keyring check and says what it saw."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The host's stand-in: doctor's keyring check, in the session the script made.
HOST = """#!/bin/sh
echo "host args: $*"
exec {python} -c 'from cadre_desktop.cli.doctor import check_keyring; print(check_keyring().line())'
"""


@pytest.fixture
def box(tmp_path):
    """A copy of the repo's scripts over a .venv whose python is this one, and a home with no
    session bus (a headless box: no DBUS_SESSION_BUS_ADDRESS, an empty runtime folder)."""
    for tool in ("dbus-run-session", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing; ./scripts/test installs it (dbus, gnome-keyring)")
    root = tmp_path / "root"
    shutil.copytree(REPO / "scripts", root / "scripts")
    venv_bin = root / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (root / ".venv" / ".installed-run").touch()
    (venv_bin / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv_bin / "cadre-desktop").write_text(HOST.format(python=sys.executable))
    for name in ("python", "cadre-desktop"):
        (venv_bin / name).chmod(0o755)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return root, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime),
                  "PYTHONPATH": str(REPO)}


def run_headless(root: Path, env: dict[str, str], stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(root / "scripts" / "run"), "--headless"], input=stdin, capture_output=True,
                          text=True, timeout=120, env=env)


def test_gnome_keyring_chosen_runs_the_host_with_a_keyring_that_keeps_secrets(box):
    root, env = box
    env = {**env, "CADRE_HEADLESS_KEYRING": "gnome-keyring"}
    first = run_headless(root, env, "correct horse\n")
    assert first.returncode == 0, first.stderr
    assert "host args: --headless" in first.stdout
    assert "ok      keyring: a secret can be stored and deleted" in first.stdout, first.stdout + first.stderr
    assert "correct horse" not in first.stdout + first.stderr  # the password is said nowhere
    assert "starting the headless host in a D-Bus session of its own" in first.stderr
    keyring = Path(env["HOME"]) / ".local" / "share" / "keyrings" / "login.keyring"
    assert keyring.exists() and keyring.stat().st_mode & 0o077 == 0

    again = run_headless(root, env, "correct horse\n")  # the same password: the same keyring opens
    assert "ok      keyring:" in again.stdout, again.stdout + again.stderr
    wrong = run_headless(root, env, "battery staple\n")
    assert "FAIL    keyring: The keyring is locked" in wrong.stdout, wrong.stdout + wrong.stderr


def test_without_a_keyring_or_a_choice_the_host_does_not_start(box):
    root, env = box
    done = run_headless(root, env, "")
    assert done.returncode == 2 and "host args" not in done.stdout
    assert "No keyring (Secret Service) answers on this machine" in done.stderr


def test_doctor_on_a_box_with_no_session_bus_says_how_to_get_a_keyring(box):
    _root, env = box
    code = "from cadre_desktop.cli.doctor import check_keyring; print(check_keyring().line())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.startswith("FAIL    keyring: No usable keyring"), done.stdout + done.stderr
    assert "`./scripts/run --headless` offers GNOME Keyring in a D-Bus session of its own" in done.stdout


def _start_real_host(root: Path, env: dict[str, str], password: str) -> subprocess.Popen:
    proc = subprocess.Popen(["bash", str(root / "scripts" / "run"), "--headless"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    assert proc.stdin is not None
    proc.stdin.write(password.encode() + b"\n")
    proc.stdin.close()
    return proc


def _stop_real_host(proc: subprocess.Popen, home: Path) -> None:
    """SIGTERM to the session the script made (the host, dbus-run-session, its bus), as a service
    manager stops it; then until the host itself has gone."""
    import json
    import os
    import signal

    import psutil

    from tests.support.polling import wait_until

    try:
        host_pid = json.loads((home / "control.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        host_pid = None
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    if host_pid is not None:
        wait_until(lambda: not psutil.pid_exists(host_pid) or psutil.Process(host_pid).status() == "zombie",
                   timeout=30, interval=0.1, what="the host stopped")


def test_the_real_host_keeps_a_nodes_secret_in_the_sessions_keyring_across_restarts(box, tmp_path):
    import json

    from tests.support.headless import control_request, fast_settings
    from tests.support.polling import wait_until

    root, env = box
    (root / ".venv" / "bin" / "cadre-desktop").write_text(f'#!/bin/sh\nexec {sys.executable} -m cadre_desktop "$@"\n')
    home = tmp_path / "cadre-home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(fast_settings()))
    env = {**env, "CADRE_HEADLESS_KEYRING": "gnome-keyring", "CADRE_DESKTOP_HOME": str(home)}

    def node_when(node_id: str, ok) -> dict:
        return wait_until(lambda: ok(v := control_request(home, "GET", f"/api/nodes/{node_id}")[1]) and v,
                          timeout=60, interval=0.2, what="the node as expected")

    proc = _start_real_host(root, env, "correct horse")
    try:
        wait_until(lambda: (home / "control.json").exists(), timeout=60, interval=0.1, what="the host's control API")
        status, body = control_request(home, "POST", "/api/nodes", {"name": "Kitchen"})
        assert status in (200, 201), body  # its claim secret went into the session's keyring
        node_id = body["id"]
        first = node_when(node_id, lambda v: v.get("ready") and v.get("claim_url"))
    finally:
        _stop_real_host(proc, home)
    (home / "control.json").unlink(missing_ok=True)

    proc = _start_real_host(root, env, "correct horse")  # the same password: the same keyring, the same secret
    try:
        wait_until(lambda: (home / "control.json").exists(), timeout=60, interval=0.1, what="the host again")
        again = node_when(node_id, lambda v: v.get("ready") and v.get("claim_url"))
        assert again["claim_url"] == first["claim_url"] and not again.get("waiting_for")
    finally:
        _stop_real_host(proc, home)
