"""A home the host cannot use is one message and exit 1: never a traceback, a hang or a memory blow-up.

Each case spoils one thing of an otherwise good home: the home is a file or on
a read-only disk; a FIFO, a folder, a device or a symbolic link sits where one
of its files belongs; settings.json is huge or holds numbers too large to use
or a `bind_host` this machine does not have. The headless host must exit 1
within a bounded time with one line naming the file or setting, leave every
file as it was, and start nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.headless import REPO, host_settings
from tests.support.node_scan import kill_node_processes


def run_headless(home, keyring_env) -> tuple[int | None, str]:
    """(exit code, stderr) of a headless host on `home`; None if it still ran after 20 s (served or hung).

    Nothing in the home is read here: a FIFO in it would hang the test itself.
    """
    env = {**os.environ, **keyring_env, "CADRE_DESKTOP_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop", "--headless"], env=env, cwd=home.parent,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=20)
        return proc.returncode, stderr
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        return None, stderr


def spoil_and_run(home, keyring_env, settings: dict, spoil) -> tuple[int | None, str, str]:
    home.mkdir(exist_ok=True)
    (home / "settings.json").write_text(json.dumps(settings))
    target = spoil(home)
    try:
        code, stderr = run_headless(home, keyring_env)
    finally:
        started = kill_node_processes(home) if home.is_dir() else []
    assert not started, "a node was started by a host that refused to start"
    return code, stderr, str(target)


def fifo(name):
    def spoil(home):
        os.mkfifo(home / name)
        return home / name
    return spoil


def folder(name):
    def spoil(home):
        (home / name).mkdir()
        return home / name
    return spoil


def symlink(name, to):
    def spoil(home):
        (home / name).unlink(missing_ok=True)
        (home / name).symlink_to(to)
        return home / name
    return spoil


def check_one_line(code, stderr, *words):
    assert code == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("cadre-desktop: ") and "Traceback" not in stderr
    for word in words:
        assert word in lines[0], lines[0]


CASES = {
    "records file is a FIFO": (fifo("hosted-nodes.json"), "named pipe"),
    "state file is a FIFO": (fifo("state.json"), "named pipe"),
    "control file is a FIFO": (fifo("control.json"), "named pipe"),
    "lock file is a FIFO": (fifo("host.lock"), "named pipe"),
    "settings file is a FIFO": (fifo("settings.json.fifo"), "named pipe"),
    "records file is a folder": (folder("hosted-nodes.json"), "a folder, not a file"),
    "state file is a folder": (folder("state.json"), "a folder, not a file"),
    "control file is a folder": (folder("control.json"), "a folder, not a file"),
    "settings name /dev/zero": (symlink("settings.json", "/dev/zero"), "a device"),
    "nodes is a file": (lambda home: ((home / "nodes").write_text("x"), home / "nodes")[1], "a file, not a folder"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_non_file_where_a_file_belongs_is_one_message_naming_it(tmp_path, rng, secret_service, case):
    spoil, words = CASES[case]
    home = tmp_path / "home"
    settings = host_settings(rng)
    if case == "settings file is a FIFO":
        def spoil(home):  # noqa: F811 - the settings file itself, written by the test first
            (home / "settings.json").unlink()
            os.mkfifo(home / "settings.json")
            return home / "settings.json"
    code, stderr, target = spoil_and_run(home, secret_service, settings, spoil)
    check_one_line(code, stderr, target, words)


def test_a_symbolic_link_where_the_host_keeps_its_own_file_is_refused(tmp_path, rng, secret_service):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"version": 2, "handles": {}}))
    code, stderr, target = spoil_and_run(tmp_path / "home", secret_service, host_settings(rng),
                                         symlink("state.json", elsewhere))
    check_one_line(code, stderr, target, "symbolic link")


def test_a_huge_settings_file_is_refused_before_it_is_read(tmp_path, rng, secret_service):
    def spoil(home):
        with open(home / "settings.json", "wb") as fh:
            fh.truncate(64 << 20)  # sparse: 64 MiB of nothing
        return home / "settings.json"
    code, stderr, target = spoil_and_run(tmp_path / "home", secret_service, host_settings(rng), spoil)
    check_one_line(code, stderr, target, "larger than 1 MiB")


def test_a_home_that_is_a_file_is_one_message(tmp_path, secret_service):
    home = tmp_path / "home"
    home.write_text("not a folder")
    env = {**os.environ, **secret_service, "CADRE_DESKTOP_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "cadre_desktop", "--headless"], env=env, capture_output=True,
                          text=True, timeout=30, cwd=tmp_path)
    check_one_line(done.returncode, done.stderr, str(home), "not a folder")
    assert home.read_text() == "not a folder"


@pytest.fixture
def read_only_home(tmp_path, rng):
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(host_settings(rng)))
    if os.geteuid() != 0:
        home.chmod(0o500)
        yield home
        home.chmod(0o700)
        return
    # root ignores permission bits: a read-only mount is what is really read-only.
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(home)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only folder here ({done.stderr.strip() or 'no privilege'})")
    try:
        (home / "settings.json").write_text(json.dumps(host_settings(rng)))
        subprocess.run(["mount", "-o", "remount,ro", str(home)], check=True, capture_output=True)
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], capture_output=True)


def test_a_read_only_home_is_one_message(read_only_home, secret_service):
    before = sorted(p.name for p in read_only_home.iterdir())
    code, stderr = run_headless(read_only_home, secret_service)
    check_one_line(code, stderr, str(read_only_home), "cannot write")
    assert sorted(p.name for p in read_only_home.iterdir()) == before


@pytest.mark.parametrize("key, value, words", [
    ("respawn_backoff_base_ms", 10**15, "at most 3600000 (one hour)"),
    ("respawn_max_attempts", 10**9, "at most 1000"),
    ("probe_interval_ms", 10**12, "at most 600000 (ten minutes)"),
    ("sweep_ms", 2**63, "at most 3600000"),
    ("bind_host", "192.0.2.44", "not an address of this computer"),
])
def test_settings_that_cannot_work_are_one_message_naming_the_setting(tmp_path, rng, secret_service,
                                                                        key, value, words):
    code, stderr, _ = spoil_and_run(tmp_path / "home", secret_service, host_settings(rng, **{key: value}),
                                    lambda home: home)
    check_one_line(code, stderr, f"'{key}'", words)
