"""Keyring entries keyed by home: names, the old-name migration, and deletes only for ids the home knows."""

from __future__ import annotations

import json

import pytest

from cadre_desktop.errors import StorageError
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.core.records.store import FILE_VERSION, KEYRING_LAYOUT, RecordStore
from cadre_desktop.host.core.vault.secrets import SERVICE, SecretKind, SecretStore, move_legacy_entries
from tests.support.keyrings import MemoryKeyring

STAMP = "2026-01-01T00:00:00.000Z"


def rec(node_id: str) -> NodeRecord:
    return NodeRecord(id=node_id, name=node_id, status=NodeStatus.UNCLAIMED, created_at=STAMP, updated_at=STAMP)


@pytest.fixture
def keyring():
    return MemoryKeyring()


async def test_entries_are_named_by_home_and_node(keyring):
    store = SecretStore(keyring, home_id="hhome0001")
    try:
        await store.set("n1", SecretKind.CLAIM, "s1")
        await store.set("n1", SecretKind.INVITATION, "i1")
        assert keyring.items == {(SERVICE, "hhome0001/n1/claim-secret"): "s1",
                                 (SERVICE, "hhome0001/n1/invitation"): "i1"}
        assert await store.get("n1", SecretKind.CLAIM) == "s1"
    finally:
        store.close()


async def test_two_homes_with_the_same_node_id_never_touch_each_other(keyring):
    known = {"a": {"n1"}, "b": {"n1"}}
    a = SecretStore(keyring, home_id="hhomeaaaa", owns=lambda n: n in known["a"])
    b = SecretStore(keyring, home_id="hhomebbbb", owns=lambda n: n in known["b"])
    try:
        await a.set("n1", SecretKind.CLAIM, "from a")
        await b.set("n1", SecretKind.CLAIM, "from b")
        await a.delete_all("n1")
        assert await b.get("n1", SecretKind.CLAIM) == "from b"
        assert await a.get("n1", SecretKind.CLAIM) is None
    finally:
        a.close()
        b.close()


async def test_deleting_an_id_the_home_never_had_touches_nothing(keyring):
    keyring.items[(SERVICE, "hmine0001/stranger/claim-secret")] = "kept"
    keyring.items[(SERVICE, "stranger/claim-secret")] = "kept too"
    store = SecretStore(keyring, home_id="hmine0001", owns=lambda n: n == "mine", legacy=True)
    try:
        await store.delete_all("stranger")
        assert len(keyring.items) == 2
    finally:
        store.close()


async def test_old_names_are_read_and_moved_until_the_migration_is_done(keyring):
    keyring.items[(SERVICE, "n1/claim-secret")] = "old secret"
    keyring.items[(SERVICE, "n2/invitation")] = "old invitation"
    keyring.items[(SERVICE, "n3/claim-secret")] = "stale"
    keyring.items[(SERVICE, "hhome0001/n3/claim-secret")] = "current"
    store = SecretStore(keyring, home_id="hhome0001", owns=lambda n: True, legacy=True)
    try:
        assert await store.get("n1", SecretKind.CLAIM) == "old secret"  # read where it is, and moved
        assert keyring.items.get((SERVICE, "hhome0001/n1/claim-secret")) == "old secret"
        assert (SERVICE, "n1/claim-secret") not in keyring.items
        assert await move_legacy_entries(store, ["n2", "n3", "n4"]) == 2
        assert keyring.items == {(SERVICE, "hhome0001/n1/claim-secret"): "old secret",
                                 (SERVICE, "hhome0001/n2/invitation"): "old invitation",
                                 (SERVICE, "hhome0001/n3/claim-secret"): "current"}
    finally:
        store.close()


async def test_a_store_bound_to_no_home_keeps_the_old_names_and_the_doctor_leaves_nothing(keyring):
    store = SecretStore(keyring)
    try:
        await store.set("n1", SecretKind.CLAIM, "x")
        assert (SERVICE, "n1/claim-secret") in keyring.items
        store.bind_home("hhome0002", lambda n: True)
        await store.check()
        assert list(keyring.items) == [(SERVICE, "n1/claim-secret")]
    finally:
        store.close()


# -- the home id in the records file ----------------------------------------------------------------

def test_a_new_home_gets_an_id_that_is_written_with_its_first_record_and_kept(tmp_path):
    path = tmp_path / "hosted-nodes.json"
    store = RecordStore(path)
    home = store.home_id
    assert not path.exists()
    store.put(rec("n1"))
    doc = json.loads(path.read_text())
    assert doc["home_id"] == home and doc["keyring_layout"] == KEYRING_LAYOUT and doc["version"] == FILE_VERSION
    assert RecordStore(path).home_id == home
    assert RecordStore(tmp_path / "other.json").home_id != home


def test_a_version_1_file_is_upgraded_with_a_home_id_written_before_any_entry_moves(tmp_path):
    path = tmp_path / "hosted-nodes.json"
    v1 = json.dumps({"version": 1, "nodes": {"n1": {"name": "Old", "status": "joined"}},
                     "removing": {"n9": STAMP}}).encode()
    path.write_bytes(v1)
    store = RecordStore(path)
    assert store.keyring_layout == 1 and store.knows("n1") and store.knows("n9") and not store.knows("n5")
    assert path.read_bytes() == v1  # reading alone never rewrites
    store.save_upgrade()
    doc = json.loads(path.read_text())
    assert doc["version"] == FILE_VERSION and doc["home_id"] == store.home_id and doc["keyring_layout"] == 1
    assert (tmp_path / "hosted-nodes.json.v1.bak").read_bytes() == v1
    store.keyring_moved()
    again = RecordStore(path)
    assert again.keyring_layout == KEYRING_LAYOUT and again.home_id == store.home_id


@pytest.mark.parametrize("home_id", [None, "", "../x", 7, "short"])
def test_a_current_file_without_a_valid_home_id_is_refused(tmp_path, home_id):
    path = tmp_path / "hosted-nodes.json"
    doc = {"version": FILE_VERSION, "nodes": {}}
    if home_id is not None:
        doc["home_id"] = home_id
    path.write_text(json.dumps(doc))
    with pytest.raises(StorageError, match="home_id"):
        RecordStore(path).load()
