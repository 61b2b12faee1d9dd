"""Malformed files refuse the start; a full disk fails a save cleanly.

Each file the host keeps (records, state, settings, control) is made empty,
truncated, not JSON, of a future version, or of the wrong shape, in an
otherwise good home. The headless host must exit 1 with one message naming
the file and the problem, leave the file byte for byte as it was, and start
nothing. A save that hits a full disk (an injected ENOSPC in-process and in a
running host, and a real tiny tmpfs where mounting is allowed) must fail with
a clear error and leave the previous file whole.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadre_desktop.errors import StorageError
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.host.edges.control import check_control_file
from cadre_desktop.host.local.orchestrator import Orchestrator
from cadre_desktop.host.local.ports import PortAllocator
from tests.support.headless import REPO, host_settings
from tests.support.host_calls import answered, running
from tests.support.instrumented_host import FULL_ENV, InstrumentedHost
from tests.support.node_scan import kill_node_processes, node_processes
from tests.support.polling import wait_until
from tests.support.real_orchestrator import port_range
from tests.support.secret_items import secret_items

STAMP = "2026-01-01T00:00:00.000Z"
RECORDS = {"version": 1, "nodes": {"nkeep0001": {
    "name": "Kept", "status": "unclaimed", "mode": "claim", "handle": "nkeep0001.00000001",
    "api_port": 20010, "p2p_port": 20011, "created_at": STAMP, "updated_at": STAMP}}}
STATE = {"version": 1, "handles": {"nkeep0001.00000001": {
    "node_id": "nkeep0001", "pid": 999999, "start_time": "1", "boot_id": None,
    "api_port": 20010, "p2p_port": 20011, "started_at": STAMP}}}
CONTROL = {"version": 1, "url": "http://127.0.0.1:1", "token": "stale-token-of-a-dead-host", "pid": 999999}

GOOD = {"hosted-nodes.json": RECORDS, "state.json": STATE, "control.json": CONTROL}


def pretty(doc) -> bytes:
    return json.dumps(doc, indent=2).encode()


CORRUPTIONS = {
    "hosted-nodes.json": {
        "empty": (b"", "empty"),
        "truncated": (pretty(RECORDS)[:70], "not valid JSON"),
        "not JSON": (b"\xff\xfe<records/>", "not valid JSON"),
        "future version": (pretty({"version": 99, "nodes": {}}), "version 99"),
        "nodes not an object": (pretty({"version": 1, "nodes": []}), "'nodes'"),
        "row of the wrong shape": (pretty({"version": 1, "nodes": {"n1": {"name": 7}}}), "bad row"),
        "removals of the wrong shape": (pretty({"version": 1, "nodes": {}, "removing": ["n1"]}), "'removing'"),
        "id that climbs out of nodes/": (
            pretty({"version": 1, "nodes": {"../../outside": {"name": "x", "status": "joined"}}}),
            "not a valid node id"),
    },
    "state.json": {
        "empty": (b"   \n", "empty"),
        "truncated": (pretty(STATE)[:60], "not valid JSON"),
        "not JSON": (b"handles: none", "not valid JSON"),
        "future version": (pretty({"version": 99, "handles": {}}), "version 99"),
        "handles not an object": (pretty({"version": 1, "handles": "all"}), "'handles'"),
        "row of the wrong shape": (pretty({"version": 1, "handles": {"h": {"pid": "12"}}}), "bad row"),
    },
    "settings.json": {
        "empty": (b"", "empty"),
        "truncated": (b'{"sweep_ms": 6', "not valid JSON"),
        "not JSON": (b"sweep_ms = 60000", "not valid JSON"),
        "future version": (pretty({"version": 2}), "unknown setting 'version'"),
        "not an object": (pretty([1, 2]), "must be a JSON object"),
        "value of the wrong type": (pretty({"sweep_ms": "often"}), "'sweep_ms'"),
    },
    "control.json": {
        "empty": (b"", "empty"),
        "truncated": (pretty(CONTROL)[:30], "not valid JSON"),
        "not JSON": (b"\x00\x01\x02", "not valid JSON"),
        "future version": (pretty({**CONTROL, "version": 7}), "version 7"),
        "url of the wrong type": (pretty({**CONTROL, "url": 5}), "'url'"),
    },
}
CASES = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name, kinds in CORRUPTIONS.items() for kind in kinds
]


def run_headless(home: Path, keyring_env: dict) -> tuple[int | None, str]:
    """(exit code, stderr) of a headless host on `home`; None if it started serving instead."""
    env = {**os.environ, **keyring_env, "CADRE_DESKTOP_HOME": str(home), "PYTHONPATH": str(REPO)}
    control = home / "control.json"
    before = control.read_bytes() if control.exists() else None
    with open(home.parent / "stderr.txt", "w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop", "--headless"], env=env, cwd=home,
                                stdout=subprocess.DEVNULL, stderr=err)
        serving = lambda: control.exists() and control.read_bytes() != before  # noqa: E731
        served = False
        try:
            wait_until(lambda: proc.poll() is not None or serving(), timeout=30, interval=0.02,
                       what="the host to exit or serve")
            served = serving()
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(30)
        err.seek(0)
        return (None if served else proc.returncode), err.read()


@pytest.mark.parametrize("name, kind", CASES)
def test_malformed_file_refuses_start_naming_it_and_leaves_it_byte_identical(tmp_path, rng, secret_service,
                                                                           name, kind):
    home = tmp_path / "home"
    home.mkdir()
    files = {**{k: pretty(v) for k, v in GOOD.items()}, "settings.json": pretty(host_settings(rng))}
    bad, problem = CORRUPTIONS[name][kind]
    files[name] = bad
    for file_name, data in files.items():
        (home / file_name).write_bytes(data)
    try:
        result = run_headless(home, secret_service)
    finally:
        started = kill_node_processes(home)
    code, stderr = result
    assert code is not None, f"the host started and served despite a malformed {name}"
    assert code == 1, stderr
    message = stderr.strip().splitlines()[-1]
    assert message.startswith("cadre-desktop: ") and str(home / name) in message, message
    assert problem in message, message
    assert "Traceback" not in stderr
    for file_name, data in files.items():
        assert (home / file_name).read_bytes() == data, f"{file_name} was changed"
    assert not started, "a node was started by a host that refused to start"
    assert not (home / "nodes").exists()


@pytest.mark.parametrize("kind", list(CORRUPTIONS["control.json"]))
def test_control_file_check_refuses_what_no_host_wrote_and_leaves_it(tmp_path, kind):
    """The check host.py needs : ready, and right on its own."""
    path = tmp_path / "control.json"
    bad, problem = CORRUPTIONS["control.json"][kind]
    path.write_bytes(bad)
    with pytest.raises(StorageError) as err:
        check_control_file(path)
    assert str(path) in err.value.message and problem in err.value.message
    assert path.read_bytes() == bad


def test_control_file_check_accepts_a_stale_file_and_no_file(tmp_path):
    path = tmp_path / "control.json"
    check_control_file(path)
    path.write_bytes(pretty(CONTROL))  # left by a host that was killed: replaced at start
    check_control_file(path)


# -- a full disk during a save --------------------------------------------------------------------

def enospc(real_write, target_prefix: str):
    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1].startswith(target_prefix):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)
    return write


def record(node_id: str, name: str) -> NodeRecord:
    return NodeRecord(id=node_id, name=name, status=NodeStatus.JOINED, created_at=STAMP, updated_at=STAMP)


@pytest.mark.parametrize("fails", ["write", "fsync"])
def test_full_disk_during_records_save_is_a_clear_error_and_the_file_is_intact(tmp_path, monkeypatch, fails):
    path = tmp_path / "hosted-nodes.json"
    store = RecordStore(path)
    store.put(record("n1", "first"))
    before = path.read_bytes()
    if fails == "write":
        monkeypatch.setattr(os, "write", enospc(os.write, ".hosted-nodes.json."))
    else:
        def no_space(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StorageError) as err:
        store.put(record("n2", "second"))
    with pytest.raises(StorageError):
        store.remove("n1")
    monkeypatch.undo()
    assert str(path) in err.value.message and "No space left on device" in err.value.message
    assert "previous file is intact" in err.value.message
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosted-nodes.json"], "a temp file was left"
    assert [r.id for r in store.list()] == ["n1"], "the cache took a change the file did not"
    assert [r.id for r in RecordStore(path).list()] == ["n1"]


def test_full_disk_during_state_save_is_a_clear_error_and_the_file_is_intact(tmp_path, monkeypatch):
    from cadre_desktop.paths import Paths

    state = tmp_path / "state.json"
    state.write_bytes(pretty({"version": 1, "handles": {}}))
    before = state.read_bytes()
    orch = Orchestrator(paths=Paths(tmp_path, tmp_path, tmp_path / "logs"),
                        node_command=["true"], ports=PortAllocator(*port_range(tmp_path)), bind_host="127.0.0.1",
                        advertise_host=lambda: "127.0.0.1")
    monkeypatch.setattr(os, "write", enospc(os.write, ".state.json."))
    with pytest.raises(StorageError) as err:
        orch.state.write()
    monkeypatch.undo()
    assert str(state) in err.value.message and "No space left on device" in err.value.message
    assert state.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_full_disk_in_a_running_host_fails_add_and_remove_clearly_and_keeps_everything(tmp_path, hosts, rng,
                                                                                        secret_service):
    host = hosts(host_settings(rng), kind=InstrumentedHost)
    flag = tmp_path / "disk-full"
    host.env[FULL_ENV] = str(flag)
    host.start()
    kept = running(host, answered(host, "POST", "/api/nodes", {"name": "kept"})[1]["id"])
    records = (host.home / "hosted-nodes.json").read_bytes()
    items = secret_items(secret_service)
    flag.touch()
    status, body = answered(host, "POST", "/api/nodes", {"name": "no room"})
    assert status == 500 and body["error"]["code"] == "storage_error", body
    assert "No space left on device" in body["error"]["message"]
    assert "free some disk space" in body["error"]["message"]
    status, body = answered(host, "DELETE", f"/api/nodes/{kept['id']}")
    assert status == 500 and body["error"]["code"] == "storage_error", body
    assert (host.home / "hosted-nodes.json").read_bytes() == records
    assert secret_items(secret_service) == items, "a keyring entry changed though nothing was saved"
    assert list(node_processes(host.home)) == [kept["id"]]
    assert answered(host, "GET", f"/api/nodes/{kept['id']}")[1]["pid"] == kept["pid"], "the kept node was disturbed"
    flag.unlink()
    assert answered(host, "POST", "/api/nodes", {"name": "room again"})[0] == 201
    assert host.stop() == 0


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if not sys.platform.startswith("linux"):
        pytest.skip("tmpfs is Linux only; the injected-ENOSPC tests cover this platform")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'no privilege'}); "
                    "the injected-ENOSPC tests cover a full disk")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_full_tmpfs_during_records_save_is_a_clear_error_and_the_file_is_intact(tiny_tmpfs):
    path = tiny_tmpfs / "hosted-nodes.json"
    store = RecordStore(path)
    store.put(record("n1", "first"))
    before = path.read_bytes()
    filler = tiny_tmpfs / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with pytest.raises(StorageError) as err:
        store.put(record("n2", "a name long enough " * 200))
    assert "No space left on device" in err.value.message
    assert path.read_bytes() == before
    assert not [p for p in tiny_tmpfs.iterdir() if p.name.endswith(".tmp")]
    filler.unlink()
    store.put(record("n2", "second"))
    assert [r.id for r in RecordStore(path).list()] == ["n1", "n2"]
