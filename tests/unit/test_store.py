import json
import os

import pytest

from cadre_desktop.errors import StorageError
from cadre_desktop.files.atomicfile import write_bytes_atomic
from cadre_desktop.host.core.records.records import NodeMode, NodeRecord, NodeStatus, RespawnInfo
from cadre_desktop.host.core.records.store import FILE_VERSION, RecordStore


def rec(node_id="n1", **kw) -> NodeRecord:
    base = dict(id=node_id, name="Kitchen", status=NodeStatus.UNCLAIMED, created_at="2026-01-01T00:00:00Z")
    base.update(kw)
    return NodeRecord(**base)


def test_round_trip_through_the_file(tmp_path):
    path = tmp_path / "hosted-nodes.json"
    store = RecordStore(path)
    r = rec(handle="n1.abc", api_port=47100, p2p_port=47101, respawn=RespawnInfo(2, "2026-01-01T00:00:05Z"),
            mode=NodeMode.INVITATION, cadre="family")
    store.put(r)
    store.put(rec("n2", status=NodeStatus.ERROR, error="gave up"))
    fresh = RecordStore(path)
    assert fresh.get("n1") == r
    assert [x.id for x in fresh.list()] == ["n1", "n2"]
    assert json.loads(path.read_text())["version"] == FILE_VERSION
    assert fresh.remove("n1") is True
    assert fresh.remove("n1") is False
    assert RecordStore(path).get("n1") is None


def test_file_is_private(tmp_path):
    store = RecordStore(tmp_path / "hosted-nodes.json")
    store.put(rec())
    assert (tmp_path / "hosted-nodes.json").stat().st_mode & 0o777 == 0o600


def test_missing_file_is_an_empty_store_and_is_not_created_by_reading(tmp_path):
    store = RecordStore(tmp_path / "hosted-nodes.json")
    assert store.list() == []
    assert not (tmp_path / "hosted-nodes.json").exists()


def test_unknown_fields_of_a_newer_build_are_kept(tmp_path):
    path = tmp_path / "hosted-nodes.json"
    path.write_text(json.dumps({"version": 1, "nodes": {"n1": {"name": "A", "status": "joined", "colour": "red"}}}))
    store = RecordStore(path)
    rec = store.get("n1")
    assert rec is not None
    store.put(rec.replace(name="B"))
    assert json.loads(path.read_text())["nodes"]["n1"]["colour"] == "red"


@pytest.mark.parametrize(
    "raw, problem",
    [
        (b"", "empty"),
        (b'{"version": 1, "nodes": {"n1": {"name": "A", "sta', "not valid JSON"),
        (b"not json at all", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"nodes": {}}', "no valid version"),
        (b'{"version": 99, "nodes": {}}', "newer cadre-desktop"),
        (b'{"version": 1, "nodes": []}', "'nodes'"),
        (b'{"version": 1, "nodes": {"n1": {"name": "A", "status": "dancing"}}}', "unknown status"),
        (b'{"version": 1, "nodes": {"n1": {"status": "joined"}}}', "no name"),
        (b'{"version": 1, "nodes": {"n1": {"name": "A", "status": "joined", "api_port": "80"}}}', "port"),
    ],
)
def test_malformed_files_raise_naming_the_path_and_stay_byte_identical(tmp_path, raw, problem):
    path = tmp_path / "hosted-nodes.json"
    path.write_bytes(raw)
    store = RecordStore(path)
    with pytest.raises(StorageError) as err:
        store.list()
    assert str(path) in err.value.message
    assert problem in err.value.message
    with pytest.raises(StorageError):
        store.put(rec())  # a write never replaces a file we could not read
    assert path.read_bytes() == raw


def test_crash_between_temp_write_and_replace_leaves_old_file_valid(tmp_path, monkeypatch):
    path = tmp_path / "hosted-nodes.json"
    store = RecordStore(path)
    store.put(rec("n1"))
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StorageError) as err:
        store.put(rec("n2"))
    assert "previous file is intact" in err.value.message
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert store.get("n2") is None  # the cache did not move ahead of the file
    assert [p.name for p in tmp_path.iterdir()] == ["hosted-nodes.json"]  # no temp left behind


def test_failed_write_of_temp_file_leaves_old_file(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    write_bytes_atomic(path, b"old")
    real_write = os.write

    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError):
        write_bytes_atomic(path, b"new")
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_upgrade_runs_one_function_per_version_step_and_keeps_a_backup(tmp_path):
    path = tmp_path / "hosted-nodes.json"
    v1 = {"version": 1, "rows": [{"id": "n1", "label": "Old"}]}
    path.write_text(json.dumps(v1))
    original = path.read_bytes()
    calls = []

    def v1_to_v2(doc):
        calls.append(1)
        return {"nodes": {r["id"]: {"title": r["label"]} for r in doc["rows"]}}

    def v2_to_v3(doc):
        calls.append(2)
        nodes = {k: {"name": v["title"], "status": "joined"} for k, v in doc["nodes"].items()}
        return {"nodes": nodes}

    store = RecordStore(path, version=3, upgrades={1: v1_to_v2, 2: v2_to_v3})
    old = store.get("n1")
    assert old is not None and old.name == "Old"
    assert calls == [1, 2]
    assert path.read_bytes() == original  # reading never rewrites
    reread = store.get("n1")
    assert reread is not None
    store.put(reread.replace(name="New"))
    assert json.loads(path.read_text())["version"] == 3
    assert (tmp_path / "hosted-nodes.json.v1.bak").read_bytes() == original


def test_missing_upgrade_step_is_an_error(tmp_path):
    path = tmp_path / "hosted-nodes.json"
    path.write_text('{"version": 1, "nodes": {}}')
    with pytest.raises(StorageError, match="cannot be upgraded"):
        RecordStore(path, version=2, upgrades={}).list()
