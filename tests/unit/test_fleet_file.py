"""fleet.json: its round trip, its mode, and files it refuses (left as they are); the identity's key kept out of files."""

from __future__ import annotations

import json
import os
import ssl
import stat

import pytest

from cadre_desktop.errors import StorageError
from cadre_desktop.host.fleet.computers import Computer, FleetDoc, FleetFile, fingerprint, new_computer_id
from cadre_desktop.host.fleet.identity import load_into, make_identity


@pytest.fixture(scope="module")
def identity():
    return make_identity(new_computer_id())


def computer(identity, name="laptop") -> Computer:
    return Computer(id=identity.computer_id, name=name, address="192.168.1.20:28091", fingerprint=fingerprint(identity.cert),
                    cert=identity.cert, paired_at="2026-12-07T01:00:00+00:00")


def test_fleet_json_round_trips_private_and_without_a_private_key(tmp_path, identity):
    file = FleetFile(tmp_path / "fleet.json")
    me = make_identity(new_computer_id())
    doc = FleetDoc(self_id=me.computer_id, self_cert=me.cert).with_computer(computer(identity))
    file.save(doc)
    assert file.load() == doc
    assert stat.S_IMODE(os.stat(file.path).st_mode) == 0o600
    text = file.path.read_text()
    assert "PRIVATE KEY" not in text and json.loads(text)["version"] == 1


def test_no_file_is_an_empty_fleet(tmp_path):
    assert FleetFile(tmp_path / "fleet.json").load() == FleetDoc()


@pytest.mark.parametrize("content", [
    "", "not json", '{"version": 99}', '{"version": 1, "computers": {}}', '{"version": 1, "self_id": "me"}',
    '{"version": 1, "computers": [{"id": "pc_x"}]}',
])
def test_a_bad_fleet_file_is_refused_and_left_as_it_is(tmp_path, content):
    path = tmp_path / "fleet.json"
    path.write_text(content)
    with pytest.raises(StorageError):
        FleetFile(path).load()
    assert path.read_text() == content


def test_a_row_whose_fingerprint_is_not_its_certificates_is_refused(tmp_path, identity):
    row = {**computer(identity).__dict__, "fingerprint": "sha256:" + "0" * 64}
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"version": 1, "computers": [row]}))
    with pytest.raises(StorageError, match="fingerprint"):
        FleetFile(path).load()


def test_two_computers_of_one_name_are_told_apart_by_id(identity):
    other = make_identity(new_computer_id())
    doc = FleetDoc().with_computer(computer(identity)).with_computer(computer(other))
    assert [c.name for c in doc.computers] == ["laptop", "laptop"] and len({c.id for c in doc.computers}) == 2


@pytest.mark.parametrize("memfd", [True, False] if hasattr(os, "memfd_create") else [False])
def test_the_key_reaches_openssl_through_memory_or_a_file_gone_at_once(tmp_path, identity, memfd, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_into(ctx, identity, memfd=memfd)
    assert list(tmp_path.iterdir()) == []


def test_doctor_tells_each_paired_computers_state_key_and_clock(tmp_path):
    from cadre_desktop.cli.doctor import Outcome, check_fleet
    from cadre_desktop.paths import resolve_paths
    from cadre_desktop.settings import Settings

    doc = {"computers": [
        {"id": "pc_me", "name": "desk", "self": True, "listening": True},
        {"id": "pc_a", "name": "nas", "state": "online", "address": "10.0.0.2:28091", "fingerprint": "sha256:ab12",
         "clock_offset_ms": 12.0},
        {"id": "pc_b", "name": "laptop", "state": "unreachable", "unreachable_since": "2026-12-07T01:00:00+00:00",
         "fingerprint": "sha256:cd34"},
        {"id": "pc_c", "name": "box", "state": "online", "address": "10.0.0.4:28091", "fingerprint": "sha256:ef56",
         "clock_offset_ms": -9000.0},
    ]}
    results = check_fleet(resolve_paths({"CADRE_DESKTOP_HOME": str(tmp_path)}), Settings(), fleet=lambda: doc)
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.OK, Outcome.WARN, Outcome.WARN]
    assert "clock +12 ms" in results[1].detail and "sha256:ab12" in results[1].detail
    assert "unreachable since 2026-12-07T01:00" in results[2].detail
    assert "NTP" in results[3].detail and not any(r.failed for r in results)


async def test_this_computers_id_is_written_by_the_start_and_kept_across_starts(tmp_path):
    from cadre_desktop.host.core.clock import Clock
    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.host.fleet.fleet import Fleet
    from cadre_desktop.settings import Settings
    from tests.support.fake_host import FakeHost
    from tests.support.keyrings import MemoryKeyring

    path = tmp_path / "fleet.json"

    def fleet() -> Fleet:
        made = Fleet(file=FleetFile(path), settings=Settings, secrets=SecretStore(MemoryKeyring()), clock=Clock(),
                     host=FakeHost(tmp_path), advertise_host=lambda: "127.0.0.1")
        made.load()
        return made

    first = fleet()
    assert not path.exists()  # a start refused after the files are read leaves none written
    await first.start()
    assert FleetFile(path).load().self_id == first.self_id
    second = fleet()
    assert second.self_id == first.self_id and second.self_ref() == {"id": first.self_id, "name": second.name}
    await first.stop()


async def test_a_join_that_fails_keeps_no_key_and_writes_no_certificate(tmp_path):
    from cadre_desktop.host.core.clock import Clock
    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.host.fleet.fleet import Fleet
    from cadre_desktop.host.fleet.peers import LinkDown
    from cadre_desktop.net.netguard import bind_socket
    from cadre_desktop.settings import Settings
    from tests.support.fake_host import FakeHost
    from tests.support.keyrings import MemoryKeyring

    keyring = MemoryKeyring()
    fleet = Fleet(file=FleetFile(tmp_path / "fleet.json"), settings=Settings, secrets=SecretStore(keyring),
                  clock=Clock(), host=FakeHost(tmp_path), advertise_host=lambda: "127.0.0.1")
    fleet.load()
    await fleet.start()
    closed = bind_socket("127.0.0.1", 0, reuse=False)
    port = closed.getsockname()[1]
    closed.close()  # nobody listens there
    with pytest.raises(LinkDown):
        await fleet.join("7-2222-2222", f"127.0.0.1:{port}")
    assert keyring.items == {} and FleetFile(tmp_path / "fleet.json").load().self_cert is None
    await fleet.stop()
