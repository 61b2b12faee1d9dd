import json

import pytest

from cadre_desktop.errors import SettingsError
from cadre_desktop.paths import resolve_paths
from cadre_desktop.settings import Settings, load_settings


def test_home_variable_puts_everything_in_one_folder(tmp_path):
    paths = resolve_paths({"CADRE_DESKTOP_HOME": str(tmp_path)})
    assert paths.records_file == tmp_path / "hosted-nodes.json"
    assert paths.state_file == tmp_path / "state.json"
    assert paths.settings_file == tmp_path / "settings.json"
    assert paths.control_file == tmp_path / "control.json"
    assert paths.node_dir("abc") == tmp_path / "nodes" / "abc"
    assert paths.log_dir == tmp_path / "logs"


def test_without_home_variable_platform_folders_are_used():
    paths = resolve_paths({})
    assert "cadre-desktop" in str(paths.data_dir)
    assert paths.settings_file.parent == paths.config_dir
    assert "cadre-desktop" in str(paths.log_dir)


def test_missing_settings_file_means_defaults(tmp_path):
    s = load_settings(tmp_path / "settings.json")
    assert s == Settings()
    assert s.respawn_backoff_base_ms == 5000 and s.respawn_max_attempts == 5
    assert s.node_command[1:] == ["-m", "cadre_desktop.node"]


def test_every_key_is_read(tmp_path):
    path = tmp_path / "settings.json"
    doc = {
        "node_command": ["/bin/node-prog", "--x"], "port_range": [40000, 40010], "bind_host": "127.0.0.1",
        "advertise_host": "192.168.1.5", "respawn_backoff_base_ms": 10, "respawn_backoff_max_ms": 100,
        "respawn_max_attempts": 3, "respawn_healthy_ms": 1000, "sweep_ms": 500, "probe_interval_ms": 200,
        "stop_timeout_ms": 300, "keep_nodes_running_on_quit": True, "notifications": False,
    }
    path.write_text(json.dumps(doc))
    s = load_settings(path)
    assert s.node_command == ["/bin/node-prog", "--x"]
    assert s.port_range == (40000, 40010)
    assert s.advertise_host == "192.168.1.5"
    assert s.keep_nodes_running_on_quit is True and s.notifications is False


@pytest.mark.parametrize(
    "doc, key",
    [
        ({"sweep_msec": 5}, "sweep_msec"),
        ({"sweep_ms": "60000"}, "sweep_ms"),
        ({"sweep_ms": True}, "sweep_ms"),
        ({"notifications": 1}, "notifications"),
        ({"node_command": "python -m x"}, "node_command"),
        ({"node_command": []}, "node_command"),
        ({"port_range": [5000]}, "port_range"),
        ({"port_range": [6000, 5000]}, "port_range"),
        ({"bind_host": ""}, "bind_host"),
        ({"advertise_host": "http://x/"}, "advertise_host"),
        ({"respawn_max_attempts": 0}, "respawn_max_attempts"),
    ],
)
def test_bad_key_or_type_names_the_key_and_the_file(tmp_path, doc, key):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert repr(key) in err.value.message
    assert str(path) in err.value.message


@pytest.mark.parametrize("raw", [b"", b"{", b"[1, 2]", b"\xff\xfe"])
def test_unreadable_settings_are_an_error_naming_the_file(tmp_path, raw):
    path = tmp_path / "settings.json"
    path.write_bytes(raw)
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert str(path) in err.value.message


def test_lent_nodes_supervision_keys_default_to_the_hosted_ones_and_override_them():
    from cadre_desktop.settings import parse_settings

    plain = parse_settings({"respawn_max_attempts": 7, "start_grace_ms": 2000}, "s").donation_supervision()
    assert (plain.respawn_max_attempts, plain.start_grace_ms) == (7, 2000)
    own = parse_settings({"respawn_max_attempts": 7, "donation_respawn_max_attempts": 2,
                          "donation_start_grace_ms": 0}, "s").donation_supervision()
    assert (own.respawn_max_attempts, own.start_grace_ms) == (2, 0)


@pytest.mark.parametrize(("doc", "key"), [
    ({"lend_port": 28100}, "lend_port"),
    ({"lend_port": 80}, "lend_port"),
    ({"lend_max_nodes": 0}, "lend_max_nodes"),
    ({"donation_respawn_max_attempts": "3"}, "donation_respawn_max_attempts"),
    ({"donation_provisioning_ttl_ms": 10}, "donation_provisioning_ttl_ms"),
])
def test_bad_lending_settings_name_the_key(doc, key):
    from cadre_desktop.settings import parse_settings

    with pytest.raises(SettingsError) as err:
        parse_settings(doc, "settings.json")
    assert repr(key) in err.value.message


def test_the_default_lend_port_moves_out_of_a_port_range_that_holds_it():
    """Bug: a port_range that held 28090 (valid before lending existed) made every start fail."""
    from cadre_desktop.settings import parse_settings

    assert parse_settings({"port_range": [28050, 28099]}, "s").lend_port == 28049
    assert parse_settings({"port_range": [1024, 30000]}, "s").lend_port == 30001
    assert parse_settings({}, "s").lend_port == 28090


@pytest.mark.parametrize(("typo", "meant"), [("sweep_sm", "sweep_ms"), ("notfications", "notifications"),
                                            ("keep_nodes_running_on_exit", "keep_nodes_running_on_quit")])
def test_a_typo_says_did_you_mean_the_nearest_key_not_every_key(tmp_path, typo, meant):
    """Regression: a typo listed all thirty keys, hiding the one that was meant."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({typo: 1}))
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    message = caught.value.message
    assert f"unknown setting {typo!r}; did you mean {meant!r}?" in message
    assert "port_range" not in message and len(message) < 200 + len(str(path))


def test_an_unknown_key_like_no_other_points_to_the_readme(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"colour_scheme": "dark"}))
    with pytest.raises(SettingsError, match=r"unknown setting 'colour_scheme'; every setting is in the README"):
        load_settings(path)
