"""The fleet's etcd in the host without etcd (host/fleetrun/store.py): its settings are checked,
its ports follow the fleet port, a start never waits on it, and the views say why the store's
word is unknown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cadre_desktop.errors import InvalidState, SettingsError
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleet.identity import make_identity
from cadre_desktop.host.fleetrun.store import FleetStore, fleet_tls, member_ports, parse_endpoints, peer_endpoint
from cadre_desktop.host.fleetstate.client import Endpoint
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.shared import NodeShared
from cadre_desktop.host.local.system.seam import for_this_os
from cadre_desktop.settings import Settings, load_settings


@pytest.mark.parametrize("doc,key", [({"fleet_lease_ms": 100}, "fleet_lease_ms"),
                                     ({"fleet_etcd_endpoints": "a:1"}, "fleet_etcd_endpoints"),
                                     ({"fleet_etcd_endpoints": ["no-port"]}, "fleet_etcd_endpoints"),
                                     ({"etcd_command": []}, "etcd_command")])
def test_the_fleet_store_s_settings_are_checked_by_name(tmp_path: Path, doc: dict, key: str) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert repr(key) in err.value.message


def test_the_fleet_store_s_settings_default_to_a_15_s_lease_and_the_hosts_own_members(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"fleet_etcd_endpoints": ["10.0.0.5:2379"], "etcd_command": ["/usr/bin/etcd"]}))
    got = load_settings(path)
    assert (Settings().fleet_lease_ms, Settings().fleet_etcd_endpoints, Settings().etcd_command) == (15000, [], None)
    assert parse_endpoints(got.fleet_etcd_endpoints) == [Endpoint("10.0.0.5", 2379)] and got.etcd_command == ["/usr/bin/etcd"]


def test_a_member_listens_beside_its_computer_s_fleet_port() -> None:
    assert member_ports(28091) == (28092, 28093)
    nas = Computer(id="bbbbbbbb", name="nas", address="192.168.1.9:28500", fingerprint="f" * 64, cert="", paired_at="")
    assert peer_endpoint(nas) == Endpoint("192.168.1.9", 28501)


def test_the_member_s_certificate_is_signed_by_the_fleet_key_and_trusts_exactly_the_pinned_ones() -> None:
    from cryptography import x509

    me, other = make_identity("aaaaaaaa"), make_identity("bbbbbbbb")
    tls = fleet_tls(me, "127.0.0.1", [other.cert])
    own = x509.load_pem_x509_certificate(tls.cert_pem)
    pinned = x509.load_pem_x509_certificate(me.cert.encode())
    own.verify_directly_issued_by(pinned)  # it chains to the certificate the other computers pinned
    assert own.subject != own.issuer  # a leaf: gRPC's TLS refuses a self-signed certificate not itself pinned
    # Its own pinned certificate and the other computer's: nothing else.
    assert tls.trusted_pem == me.cert.encode() + other.cert.encode()
    assert b"PRIVATE" not in tls.cert_pem + tls.trusted_pem


def store(tmp_path: Path, computers: list[Computer]) -> FleetStore:
    async def identity():
        raise AssertionError("an unpaired computer loads no key")

    async def ask(*_args):
        raise AssertionError("an unpaired computer asks nothing")
    return FleetStore(settings=Settings, root=tmp_path / "etcd", system=for_this_os, self_id=lambda: "aaaaaaaa",
                      computers=lambda: computers, identity=identity, ask=ask, advertise=lambda: "127.0.0.1", tick_s=0.01)


def test_an_unpaired_computer_runs_no_member_and_its_views_carry_no_generation(tmp_path: Path) -> None:
    async def run() -> FleetStore:
        s = store(tmp_path, [])
        s.start()  # returns at once: the host's start never waits on etcd
        await asyncio.sleep(0.05)
        await s.stop()
        return s
    s = asyncio.run(run())
    assert s.member is None and not (tmp_path / "etcd").exists()
    assert s.view_of("n1") == {"generation": None, "failover": False, "fleet_note": None}


def test_a_store_that_does_not_answer_is_said_in_the_views_and_refuses_its_use(tmp_path: Path) -> None:
    s = store(tmp_path, [])
    s.nodes["n1"] = NodeShared("n1", holder="aaaaaaaa", generation=3, failover=True)
    s.state, s.why = "unavailable", "the fleet's store did not answer a read within 3 s"
    assert s.view_of("n1") == {"generation": 3, "failover": True, "fleet_note": "the fleet's store did not answer a read within 3 s"}
    with pytest.raises(StoreUnavailable, match="not available: the fleet's store did not answer"):
        s.store()


def test_a_computer_may_join_the_cluster_only_on_its_own_address(tmp_path: Path) -> None:
    nas = Computer(id="bbbbbbbb", name="nas", address="192.168.1.9:28500", fingerprint="f" * 64, cert="", paired_at="")
    with pytest.raises(InvalidState, match="own address"):
        asyncio.run(store(tmp_path, [nas]).join_asked(nas, "https://10.0.0.1:2380"))


def answering(answers: dict[str, object]):
    async def ask(computer, method, path, body, timeout_s):
        got = answers[computer.id]
        if isinstance(got, Exception):
            raise got
        return got
    return ask


def no_cluster() -> tuple[int, dict]:
    return 400, {"error": {"code": "fleet_no_cluster", "message": "no cluster here"}}


def pc(cid: str) -> Computer:
    return Computer(id=cid, name=cid, address="127.0.0.1:28500", fingerprint="f" * 64, cert="", paired_at="")


def test_the_smallest_fresh_computer_makes_the_cluster_only_when_every_other_says_it_has_none(tmp_path: Path) -> None:
    from cadre_desktop.host.fleet.peers import LinkDown

    s = store(tmp_path, [])
    spec = s._spec()
    s._ask = answering({"bbbbbbbb": no_cluster(), "cccccccc": no_cluster()})
    assert asyncio.run(s._join(spec, [pc("bbbbbbbb"), pc("cccccccc")])) is None  # aaaaaaaa makes it
    s._ask = answering({"bbbbbbbb": no_cluster(), "cccccccc": LinkDown("cccccccc cannot be reached")})
    with pytest.raises(StoreUnavailable, match="waits to be added"):  # one not heard from: no second cluster
        asyncio.run(s._join(spec, [pc("bbbbbbbb"), pc("cccccccc")]))
    s._self_id = lambda: "zzzzzzzz"
    s._ask = answering({"bbbbbbbb": no_cluster()})
    with pytest.raises(StoreUnavailable, match="waits to be added"):  # the smaller one makes it, not this one
        asyncio.run(s._join(spec, [pc("bbbbbbbb")]))


def test_a_computer_with_a_cluster_gives_the_joiner_its_initial_cluster(tmp_path: Path) -> None:
    s = store(tmp_path, [])
    initial = [{"name": "bbbbbbbb", "peer_url": "https://127.0.0.1:28502"}, {"name": "aaaaaaaa", "peer_url": "https://127.0.0.1:28093"}]
    s._ask = answering({"bbbbbbbb": (200, {"initial": initial})})
    peers = asyncio.run(s._join(s._spec(), [pc("bbbbbbbb")]))
    assert peers is not None and [(p.name, p.peer_url) for p in peers] == [("bbbbbbbb", "https://127.0.0.1:28502"), ("aaaaaaaa", "https://127.0.0.1:28093")]


def test_a_computer_without_a_running_member_says_it_has_no_cluster(tmp_path: Path) -> None:
    from cadre_desktop.host.fleetrun.store import NoCluster

    nas = pc("bbbbbbbb")
    with pytest.raises(NoCluster) as err:
        asyncio.run(store(tmp_path, [nas]).join_asked(nas, "https://127.0.0.1:28502"))
    assert err.value.code == "fleet_no_cluster"


def test_a_member_the_cluster_removed_is_told_by_etcd_s_own_words(tmp_path: Path) -> None:
    from cadre_desktop.host.fleetrun.store import _was_removed

    log = tmp_path / "etcd.log"
    log.write_text('{"level":"warn","msg":"server error","error":"the member has been permanently removed from the cluster"}\n')
    assert _was_removed(log)
    log.write_text('{"level":"warn","msg":"lost TCP streaming connection with remote peer"}\n')
    assert not _was_removed(log) and not _was_removed(tmp_path / "none.log")


def test_a_computer_left_alone_that_cannot_leave_its_cluster_still_stops_and_deletes_its_data(tmp_path: Path) -> None:
    """Seen in the three-host move test: charlie, unpaired by both others (who unpin it at once),
    asked its own cut-off member to take itself out, was refused ("unhealthy cluster") forever and
    never went off; its data is of no use to it once no computer is paired with it."""
    data = tmp_path / "etcd" / "data"
    (data / "member").mkdir(parents=True)

    class Spec:
        data_dir = data

    class Cluster:
        closed = False

        async def members(self):
            return [object(), object()]  # its own view: still a cluster of two

        async def close(self):
            Cluster.closed = True

    class CutOff:
        spec, running, stopped = Spec(), True, False

        def client(self, timeout_s: float = 2.0):
            return Cluster()

        async def leave(self, cluster, within_s: float = 20.0):
            raise StoreUnavailable("the fleet's store refused a member remove: etcdserver: unhealthy cluster")

        async def stop(self):
            CutOff.stopped = True

    s = store(tmp_path, [])
    s.member = CutOff()  # type: ignore[assignment]
    asyncio.run(s._alone())
    assert CutOff.stopped and not data.exists() and Cluster.closed
    assert s.member is None and s.state == "off"
