"""The log pump holds a node's log under its cap as it writes, in files only the user can read."""

from __future__ import annotations

import subprocess
import sys

from cadre_desktop.host.local import nodelogs
from cadre_desktop.logs import logpump
from tests.support.polling import wait_until


def sizes(path):
    return [p.stat().st_size for p in (path, path.with_name(path.name + ".1")) if p.exists()]


def test_log_and_its_rotation_each_stay_under_the_cap_and_rotate_at_a_line_break(tmp_path):
    path = tmp_path / "node.log"
    log = logpump.CappedLog(str(path), 1000)
    for i in range(400):
        log.write(f"line {i:04d} ".encode() + b"x" * 20 + b"\n")
    log.close()
    assert all(size <= 1000 for size in sizes(path))
    assert path.read_bytes().startswith(b"line ") and path.read_bytes().endswith(b"\n")
    assert path.with_name("node.log.1").read_bytes().endswith(b"\n")
    assert b"line 0399" in path.read_bytes()


def test_one_chunk_longer_than_the_cap_keeps_its_end(tmp_path):
    path = tmp_path / "node.log"
    log = logpump.CappedLog(str(path), 100)
    log.write(b"a" * 50 + b"\n")
    log.write(b"b" * 500)
    log.close()
    assert path.read_bytes() == b"b" * 100
    assert path.with_name("node.log.1").read_bytes() == b"a" * 50 + b"\n"


def test_files_are_created_and_rotated_0600_even_from_a_0644_file(tmp_path):
    path = tmp_path / "node.log"
    path.write_bytes(b"old\n")
    path.chmod(0o644)
    log = logpump.CappedLog(str(path), 64)
    log.write(b"y" * 40 + b"\n")
    log.write(b"z" * 40 + b"\n")
    log.close()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.with_name("node.log.1").stat().st_mode & 0o777 == 0o600


def test_two_pumps_on_one_log_never_push_it_past_the_cap(tmp_path):
    # A respawn's pump starts while the old one still drains the dead node's last lines.
    path = tmp_path / "node.log"
    first, second = logpump.CappedLog(str(path), 500), logpump.CappedLog(str(path), 500)
    for i in range(200):
        (first if i % 2 else second).write(b"%04d " % i + b"q" * 30 + b"\n")
        assert all(size <= 500 for size in sizes(path))
    first.close()
    second.close()


def test_the_pump_process_drains_its_input_ignores_sigterm_and_ends_at_end_of_file(tmp_path):
    path = tmp_path / "node.log"
    proc = subprocess.Popen([*nodelogs.pump_command(), str(path), "4096"], stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(b"first\n")
    proc.stdin.flush()
    wait_until(lambda: path.exists() and path.read_bytes() == b"first\n", what="the pump's first line")
    proc.send_signal(15)  # a terminate meant for the node's group must not cut its log short
    proc.stdin.write(b"hello\n" * 3000)
    proc.stdin.close()
    assert proc.wait(10) == 0
    assert sum(sizes(path)) <= 2 * 4096
    assert path.read_bytes().endswith(b"hello\n")


def test_the_pump_refuses_a_bad_command_line(tmp_path):
    assert logpump.main(["only-a-path"]) == 2
    assert logpump.main([str(tmp_path / "x"), "12", "--nope", "y"]) == 2


def test_the_pump_starts_in_a_bundle_through_the_cli_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert nodelogs.pump_command() == [sys.executable, "--log-pump"]
    monkeypatch.delattr(sys, "frozen")
    # What the bundle's executable does with the flag, through the same entry point.
    done = subprocess.run([sys.executable, "-m", "cadre_desktop", "--log-pump", str(tmp_path / "n.log"), "100"],
                          input=b"via the cli\n", timeout=30)
    assert done.returncode == 0
    assert (tmp_path / "n.log").read_bytes() == b"via the cli\n"
