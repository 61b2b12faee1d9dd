"""Files read only when they are regular and small; settings bounded; bind_host checked; the home made private."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from cadre_desktop.errors import SettingsError, StorageError
from cadre_desktop.files.readfile import NotAFile, TooLarge, read_bytes
from cadre_desktop.host.core.records.preflight import check_bind_host, machine_addresses, prepare_home
from cadre_desktop.paths import resolve_paths
from cadre_desktop.settings import parse_settings


def test_only_a_regular_file_of_bounded_size_is_read(tmp_path):
    good = tmp_path / "good.json"
    good.write_bytes(b"{}")
    assert read_bytes(good, max_bytes=10) == b"{}"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotAFile, match="named pipe"):
        read_bytes(tmp_path / "fifo", max_bytes=10)  # returns at once: no writer is waited for
    (tmp_path / "dir").mkdir()
    with pytest.raises(NotAFile, match="folder"):
        read_bytes(tmp_path / "dir", max_bytes=10)
    with pytest.raises(NotAFile, match="device"):
        read_bytes(Path("/dev/zero"), max_bytes=10)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(TooLarge, match="larger than 10 bytes"):
        read_bytes(big, max_bytes=10)
    (tmp_path / "link").symlink_to(good)
    assert read_bytes(tmp_path / "link", max_bytes=10) == b"{}"
    with pytest.raises(NotAFile, match="symbolic link"):
        read_bytes(tmp_path / "link", max_bytes=10, follow_symlinks=False)


@pytest.mark.parametrize("key, value, words", [
    ("respawn_backoff_base_ms", 10**15, "at most 3600000 (one hour)"),
    ("respawn_backoff_max_ms", 10**10, "at most 86400000 (one day)"),
    ("respawn_healthy_ms", 10**12, "one week"),
    ("stop_timeout_ms", 10**9, "ten minutes"),
    ("start_grace_max_ms", 10**12, "one day"),
    ("bind_host", "evil\x1b[2J", "printable"),
])
def test_every_number_has_a_ceiling_named_in_the_error(key, value, words):
    with pytest.raises(SettingsError) as err:
        parse_settings({key: value}, "settings.json")
    assert f"'{key}'" in err.value.message and words in err.value.message


def test_bind_host_must_be_an_address_of_this_machine():
    for ok in ("0.0.0.0", "::", "127.0.0.1", "localhost"):
        check_bind_host(ok, "settings.json")
    with pytest.raises(SettingsError) as err:
        check_bind_host("192.0.2.44", "settings.json")
    assert "'bind_host'" in err.value.message and "192.0.2.44" in err.value.message
    assert "127.0.0.1" in err.value.message, "the message lists this machine's addresses"
    with pytest.raises(SettingsError, match="does not resolve"):
        check_bind_host("no-such-host.invalid", "settings.json")
    assert "127.0.0.1" in machine_addresses()
    assert all(isinstance(socket.inet_pton(socket.AF_INET6 if ":" in a else socket.AF_INET, a), bytes)
               for a in machine_addresses())


def test_prepare_home_makes_the_home_logs_and_nodes_private(tmp_path):
    home = tmp_path / "home"
    (home / "nodes").mkdir(parents=True)
    home.chmod(0o755)
    paths = resolve_paths({"CADRE_DESKTOP_HOME": str(home)})
    prepare_home(paths)
    assert home.stat().st_mode & 0o777 == 0o700
    assert paths.log_dir.stat().st_mode & 0o777 == 0o700
    assert not list(home.glob(".write-check*")), "the write check leaves nothing behind"


def test_prepare_home_names_what_is_wrong(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / "state.json")
    with pytest.raises(StorageError, match=r"state file .*state.json is a named pipe \(FIFO\), not a file"):
        prepare_home(resolve_paths({"CADRE_DESKTOP_HOME": str(home)}))


def test_host_log_rotations_are_created_0600_whatever_the_umask(tmp_path):
    import logging

    from cadre_desktop.logs.logsetup import PrivateRotatingFileHandler

    old = os.umask(0o022)
    try:
        handler = PrivateRotatingFileHandler(tmp_path / "host.log", maxBytes=200, backupCount=2, encoding="utf-8")
        logger = logging.getLogger("rotation-test")
        logger.addHandler(handler)
        logger.propagate = False
        for i in range(50):
            logger.warning("line %d %s", i, "y" * 30)
        handler.close()
        logger.removeHandler(handler)
    finally:
        os.umask(old)
    files = sorted(tmp_path.iterdir())
    assert [p.name for p in files] == ["host.log", "host.log.1", "host.log.2"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files)
