"""The systemd driver's pure parts: unit names, properties (never a secret), exit codes, the
clean-quit list, where the manager is and what doctor says of it and of lingering."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from cadre_desktop.cli.doctor import Outcome, check_driver
from cadre_desktop.host.core.driver import NodeCaps
from cadre_desktop.host.drivers import driver_checks
from cadre_desktop.host.systemd import checks, quitlist, units
from cadre_desktop.host.systemd.bus import unit_path
from cadre_desktop.host.systemd.instances import Unit
from cadre_desktop.settings import Settings

SECRETS = {"CADRE_CLAIM_SECRET": "s3cret-claim-value-0123456789", "CADRE_HOST_TOKEN": "host-token-0123456789abcdef"}


def node_env(**secrets: str) -> dict[str, str]:
    return units.node_vars(node_id="n-1.a", work=Path("/w/n-1.a"), bind_host="127.0.0.1", ports=(20001, 20002),
                           advertise_host="192.0.2.7", attempt=3, secret_env=secrets or SECRETS)


def test_a_unit_is_named_by_home_node_and_attempt_and_parsed_back():
    name = units.unit_name("h0123456789abcdef", "n-1.a", 12)
    assert name == "cadre-h0123456789abcdef-n-1.a-12.service"
    assert units.parse_name("h0123456789abcdef", name) == ("n-1.a", 12)
    assert units.parse_name("hother", name) is None
    assert units.parse_name("h0123456789abcdef", "cadre-h0123456789abcdef-n1-x.service") is None
    assert units.parse_name("h0123456789abcdef", "cadre-h0123456789abcdef-n1-2.scope") is None


def test_a_units_object_path_escapes_what_is_not_alphanumeric():
    assert unit_path("cadre-h1-n.1-2.service") == \
        "/org/freedesktop/systemd1/unit/cadre_2dh1_2dn_2e1_2d2_2eservice"


def test_a_units_environment_holds_the_nodes_plain_variables_and_never_a_secret():
    env = node_env(CADRE_CLAIM_SECRET="claim-xyz-0123456789", CADRE_INVITATION="inv-abc-0123456789",
                   CADRE_SEED_TOKEN="seed-def-0123456789", CADRE_HOST_TOKEN="tok-ghi-0123456789")
    plain = units.plain_env(env, {"PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "theirs", "HOME": "/root"})
    text = "\n".join(plain)
    for secret in ("claim-xyz", "inv-abc", "seed-def", "tok-ghi", "theirs"):
        assert secret not in text
    assert "CADRE_NODE_ID=n-1.a" in plain and "CADRE_API_PORT=20001" in plain and "PATH=/usr/bin" in plain
    assert f"{units.STANDBY_VAR}=1" in plain and not any(line.startswith("HOME=") for line in plain)


def test_the_stdin_line_carries_every_node_variable_with_its_secrets():
    line = units.stdin_line(node_env())
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    doc = json.loads(line)
    assert doc["env"]["CADRE_CLAIM_SECRET"] == SECRETS["CADRE_CLAIM_SECRET"]
    assert doc["env"]["CADRE_NODE_DIR"] == "/w/n-1.a" and "PYTHONUNBUFFERED" not in doc["env"]


def test_a_units_properties_say_restart_no_its_caps_its_log_and_its_stdin_a_descriptor():
    start = units.Start(command=(sys.executable, "-m", "cadre_desktop.node"), env=["CADRE_NODE_ID=n1"],
                        work=Path("/w/n1"), log=Path("/l/node-n1.log"), stop_timeout_s=3.0,
                        caps=NodeCaps(cpu_percent=20, memory_mb=256, low_priority=True), description="d")
    props = {name: (sig, value) for name, sig, value in units.properties(start)}
    assert props["Restart"] == ("s", "no")
    assert props["MemoryMax"] == ("t", 256 << 20)
    assert props["CPUQuotaPerSecUSec"] == ("t", 200_000)
    assert props["Nice"] == ("i", units.NICE)
    assert props["StandardInputFileDescriptor"] == ("h", 0)
    assert props["StandardOutputFileToAppend"] == ("s", "/l/node-n1.log")
    assert props["ExecStart"][1][0][1] == [sys.executable, "-m", "cadre_desktop.node"]
    assert os.path.isabs(props["ExecStart"][1][0][0])
    bare = units.properties(units.Start(command=("python3",), env=[], work=Path("/w"), log=Path("/l"),
                                        stop_timeout_s=1.0, caps=NodeCaps(low_priority=False), description="d"))
    assert not {"MemoryMax", "CPUQuotaPerSecUSec", "Nice"} & {name for name, _, _ in bare}


@pytest.mark.parametrize(("code", "status", "expected"), [(1, 0, 0), (1, 3, 3), (2, 9, -9), (3, 11, -11), (0, 0, None)])
def test_an_exit_code_is_the_status_or_minus_the_signal(code, status, expected):
    assert units.returncode(code, status) == expected


def test_a_memory_cap_kill_is_said_in_words_and_only_with_a_cap():
    row = Unit(id="n1.ab", node_id="n1", unit="u", path="/p", attempt=1, api_port=1, p2p_port=2, started_at="",
               memory_mb=64, service={"Result": "oom-kill", "ExecMainCode": 2, "ExecMainStatus": 9})
    assert row.exit_cause() == "stopped by its memory cap of 64 MB" and row.exit_code() == -9
    row.service["Result"] = "signal"
    assert row.exit_cause() is None
    row.oom_killed = True
    assert row.exit_cause() == "stopped by its memory cap of 64 MB"
    row.memory_mb = None
    assert row.exit_cause() is None


def test_the_caps_say_systemd_unit():
    assert units.caps_words(NodeCaps(cpu_percent=10, memory_mb=64)) == "systemd unit (MemoryMax, CPUQuota, Nice)"
    assert units.caps_words(NodeCaps(low_priority=False)) == "systemd unit"


def test_the_clean_quit_list_is_private_and_read_once(tmp_path):
    path = tmp_path / quitlist.FILE_NAME
    assert quitlist.read_once(path) == frozenset()
    quitlist.write(path, ["n2", "n1"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"version": 1, "stopped_cleanly": ["n1", "n2"]}
    assert quitlist.read_once(path) == frozenset({"n1", "n2"})
    assert quitlist.read_once(path) == frozenset()


def test_a_broken_clean_quit_list_costs_nothing_but_the_list(tmp_path):
    path = tmp_path / quitlist.FILE_NAME
    path.write_text("{not json")
    assert quitlist.read_once(path) == frozenset()


def test_the_manager_is_found_on_the_user_bus_of_its_runtime_folder(tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path), "DBUS_SESSION_BUS_ADDRESS": "unix:path=/elsewhere"}
    assert checks.manager_address(env) is None  # no user manager runs there
    (tmp_path / "systemd").mkdir()
    assert checks.manager_address(env) == "unix:path=/elsewhere"
    (tmp_path / "bus").touch()
    assert checks.manager_address(env) == f"unix:path={tmp_path / 'bus'}"


def test_lingering_is_loginds_file_of_the_user(tmp_path):
    assert not checks.lingering("alice", tmp_path)
    (tmp_path / "alice").touch()
    assert checks.lingering("alice", tmp_path)
    assert "keep running after you log out" in checks.linger_words(True)
    assert "loginctl enable-linger" in checks.linger_words(False)


def test_doctor_says_the_driver_and_for_systemd_the_manager_and_lingering(tmp_path):
    local = check_driver(Settings())
    assert [(r.name, r.outcome) for r in local] == [("driver", Outcome.OK)] and "local" in local[0].detail
    missing = driver_checks(Settings(driver="systemd"), address=None, user="nobody-here")
    if checks.manager_address() is None:
        assert missing[0][1] is False and "cannot start nodes here" in missing[0][2]
    found = check_driver(Settings(driver="systemd"),
                         lambda s: driver_checks(s, address="unix:path=/run/user/1/bus", user="nobody-here"))
    assert [(r.name, r.outcome) for r in found] == [("driver", Outcome.OK), ("lingering", Outcome.INFO)]
    assert "started cold" in found[0].detail and "lingering is off" in found[1].detail
    refused = check_driver(Settings(driver="systemd"), lambda s: [("driver", False, "no manager")])
    assert refused[0].failed


def test_settings_take_the_systemd_driver_and_its_config_says_nothing_of_warm_starts(tmp_path):
    from cadre_desktop.host.drivers import driver_config
    from cadre_desktop.host.local.config import LocalConfig
    from cadre_desktop.settings import load_settings

    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"driver": "systemd", "warm_standby": True, "stop_timeout_ms": 2500}))
    settings = load_settings(path)
    assert settings.driver == "systemd"
    config = driver_config(settings)
    assert not isinstance(config, LocalConfig) and config.stop_timeout_s == 2.5
