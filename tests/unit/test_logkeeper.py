"""The log keeper takes only what a host may ask of it: pipes, written into logs in its own folder."""

from __future__ import annotations

import os

import pytest

from cadre_desktop.host.local.system.linux import LinuxOS
from cadre_desktop.logs import logkeeper


def closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


@pytest.mark.parametrize("log", ["{outside}/evil.log", "{logs}/sub/evil.log", "relative.log"])
def test_a_log_outside_its_folder_is_refused_and_the_descriptor_closed(tmp_path, log):
    logs, outside = tmp_path / "logs", tmp_path / "elsewhere"
    logs.mkdir()
    outside.mkdir()
    keeper = logkeeper.Keeper(str(logs), None)
    read_end, write_end = os.pipe()
    keeper.watch({"op": "watch", "id": "n1.a", "node": "n1", "cap": 1000,
                  "log": log.format(outside=outside, logs=logs)}, read_end)
    assert keeper.streams == {} and closed(read_end)
    os.close(write_end)


def test_a_descriptor_that_is_not_a_pipe_is_refused(tmp_path):
    keeper = logkeeper.Keeper(str(tmp_path), None)
    fd = os.open(tmp_path / "secret.txt", os.O_RDWR | os.O_CREAT, 0o600)
    keeper.watch({"op": "watch", "id": "n1.a", "node": "n1", "cap": 1000, "log": str(tmp_path / "n1.log")}, fd)
    assert keeper.streams == {} and closed(fd)


def test_a_pipe_is_written_under_its_cap_with_the_note_first_and_its_end_told(tmp_path):
    keeper = logkeeper.Keeper(str(tmp_path), None)
    read_end, write_end = os.pipe()
    log = tmp_path / "node-n1.log"
    keeper.watch({"op": "watch", "id": "n1.a", "node": "n1", "cap": 100, "log": str(log),
                  "note": "output may be missing\nhere"}, read_end)
    os.write(write_end, b"hello\n")
    keeper.read_stream(keeper.streams["n1.a"])
    os.close(write_end)
    keeper.read_stream(keeper.streams["n1.a"])
    assert keeper.streams == {} and closed(read_end)
    assert log.read_bytes() == b"output may be missing here\nhello\n"
    assert log.stat().st_mode & 0o777 == 0o600


def test_a_child_found_running_untracked_gets_its_nodes_newest_stream(tmp_path):
    """A host killed between a start and its state write finds the child by a census, under a new
    handle id: the keeper's stream of that node is still its output (not "no longer captured")."""
    from cadre_desktop.host.local.keeper import Kept, LogKeeper
    from cadre_desktop.paths import Paths

    keeper = LogKeeper(Paths(tmp_path, tmp_path, tmp_path / "logs"), LinuxOS())
    old, new, other = (Kept(-1, node, f"{node}.log", 100) for node in ("n1", "n1", "n2"))
    keeper.streams.update({"n1.old": old, "n1.new": new, "n2.a": other})
    assert keeper.stream_for("n1.new", "n1") is new
    assert keeper.stream_for("n1.census", "n1") is new
    assert keeper.stream_for("n3.x", "n3") is None


async def test_a_restarted_host_takes_back_good_streams_and_drops_malformed_ones(tmp_path, monkeypatch):
    """A keeper of another version (or a broken one) answering the hello: rows it cannot read are
    closed, never a host that fails to start."""
    import json
    import socket
    import threading

    from cadre_desktop.host.local import keeper as keeper_module
    from cadre_desktop.paths import Paths

    path = tmp_path / "k.sock"
    monkeypatch.setattr(keeper_module, "socket_path", lambda _paths: path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    good_r, good_w = os.pipe()
    bad_r, bad_w = os.pipe()

    def answer() -> None:
        conn, _ = server.accept()
        assert conn.recv(100).startswith(b'{"op": "hello"}')
        good = {"op": "have", "id": "n1.a", "node": "n1", "log": str(tmp_path / "node-n1.log"), "cap": 100}
        socket.send_fds(conn, [json.dumps(good).encode() + b"\n"], [good_r])
        socket.send_fds(conn, [json.dumps({"op": "have", "id": 5}).encode() + b"\n"], [bad_r])
        conn.sendall(b'{"op": "ready", "pid": 4242}\n')
        conn.recv(100)  # until the host lets go
        conn.close()
    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    keeper = keeper_module.LogKeeper(Paths(tmp_path, tmp_path, tmp_path), LinuxOS())
    await keeper.attach()
    assert keeper.pid == 4242 and list(keeper.streams) == ["n1.a"]
    assert keeper.stream_for("n1.a", "n1") is not None
    keeper.close()
    thread.join(5)
    server.close()
    for fd in (good_r, good_w, bad_r, bad_w):
        os.close(fd)
