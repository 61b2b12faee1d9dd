"""The fleet link in one process: a pinned computer is served the node calls, a dropped link is "not done"."""

from __future__ import annotations

import asyncio

import pytest

from cadre_desktop.host.fleet.computers import Computer, fingerprint
from cadre_desktop.host.fleet.identity import make_identity, server_context
from cadre_desktop.host.fleet.link import LinkServer
from cadre_desktop.host.fleet.link_api import LinkApi
from cadre_desktop.host.fleet.peers import LinkDown, Peers
from cadre_desktop.net.netguard import bind_socket
from cadre_desktop.net.plainasync import enable_asyncio_tls
from tests.support.fake_host import FakeHost

enable_asyncio_tls()


class FleetSide:
    def __init__(self) -> None:
        self.unpaired: list[str] = []
        self.sleeping: list[str] = []

    def hello(self):
        return {"id": "pc_server234567", "name": "server", "time": "2026-12-07T01:00:00+00:00"}

    async def introduced(self, by, doc) -> None:
        return None

    async def unpaired_by(self, computer) -> None:
        self.unpaired.append(computer.id)

    def peer_sleeping(self, computer) -> None:
        self.sleeping.append(computer.id)


def as_computer(identity, port: int) -> Computer:
    return Computer(id=identity.computer_id, name=identity.computer_id, address=f"127.0.0.1:{port}",
                    fingerprint=fingerprint(identity.cert), cert=identity.cert, paired_at="2026-12-07T01:00:00+00:00")


def free_port() -> int:
    sock = bind_socket("127.0.0.1", 0, reuse=False)
    port = int(sock.getsockname()[1])
    sock.close()
    return port


@pytest.fixture(scope="module")
def keys():
    return make_identity("pc_server234567"), make_identity("pc_client234567")


async def serving(keys, host: FakeHost, side: FleetSide):
    server_id, client_id = keys
    port = free_port()
    client = as_computer(client_id, 1)
    server = LinkServer(context=lambda: server_context(server_id, [client_id.cert]),
                        pinned=lambda print_: client if print_ == client.fingerprint else None,
                        handler=LinkApi(host, side), pair=lambda r, w, where: asyncio.sleep(0), can_pair=lambda: False)
    await server.start("127.0.0.1", port)
    return server, as_computer(server_id, port), Peers(lambda: client_id)


async def test_a_pinned_computer_lists_and_acts_on_this_computers_nodes(keys, tmp_path):
    host, side = FakeHost(tmp_path), FleetSide()
    view = await host.add_node("kitchen")
    server, target, peers = await serving(keys, host, side)
    try:
        status, doc = await peers.ask_json(target, "GET", "/api/nodes")
        assert status == 200 and [n["id"] for n in doc["nodes"]] == [view.id]
        status, doc = await peers.ask_json(target, "POST", f"/api/nodes/{view.id}/restart", {})
        assert status == 200 and doc["id"] == view.id
        status, doc = await peers.ask_json(target, "POST", "/fleet/sleeping", {})
        assert status == 200 and side.sleeping == [keys[1].computer_id]
        status, doc = await peers.ask_json(target, "DELETE", "/fleet/pair")
        assert status == 200 and side.unpaired == [keys[1].computer_id]
    finally:
        await peers.close()
        await server.stop()


async def test_the_link_takes_only_the_control_apis_node_calls(keys, tmp_path):
    host, side = FakeHost(tmp_path), FleetSide()
    server, target, peers = await serving(keys, host, side)
    try:
        for method, path in (("POST", "/api/nodes"), ("POST", "/api/fleet/invite"), ("GET", "/api/grants"),
                             ("POST", "/api/host/pause"), ("GET", "/api/nodes?scope=fleet")):
            status, doc = await peers.ask_json(target, method, path, {})
            assert status in (400, 404, 405) and "error" in doc, (method, path, doc)
    finally:
        await peers.close()
        await server.stop()


async def test_a_link_that_drops_before_the_answer_is_not_done(keys):
    server_id, client_id = keys
    asked = asyncio.Event()

    async def drop(reader, writer) -> None:
        await writer.start_tls(server_context(server_id, [client_id.cert]))
        await reader.readuntil(b"\r\n\r\n")
        asked.set()
        writer.transport.abort()

    listener = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    peers = Peers(lambda: client_id)
    try:
        with pytest.raises(LinkDown, match="not known done"):
            await peers.ask(as_computer(server_id, port), "POST", "/api/nodes/n1/retry", {})
        assert asked.is_set()
    finally:
        await peers.close()
        listener.close()


async def test_a_computer_with_another_key_is_not_trusted_by_the_client(keys, tmp_path):
    host, side = FakeHost(tmp_path), FleetSide()
    server, target, peers = await serving(keys, host, side)
    impostor = make_identity("pc_impostor2345")
    try:
        with pytest.raises(LinkDown):
            await peers.ask_json(as_computer(impostor, int(target.address.rsplit(":", 1)[1])), "GET", "/fleet/hello")
    finally:
        await peers.close()
        await server.stop()


async def test_an_older_tls_is_refused_in_the_handshake(keys, tmp_path):
    import ssl

    host, side = FakeHost(tmp_path), FleetSide()
    server, target, _ = await serving(keys, host, side)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.open_connection("127.0.0.1", int(target.address.rsplit(":", 1)[1]), ssl=ctx, server_hostname="")
        async with asyncio.timeout(20):  # the server's side of the failed handshake may come a turn later
            while not server.refusals:
                await asyncio.sleep(0.01)
        assert server.refusals == {"not a TLS 1.3 handshake (plain HTTP, or an older TLS)": 1}
    finally:
        await server.stop()


async def test_a_computer_that_said_it_sleeps_is_asleep_until_it_answers_again(keys):
    from cadre_desktop.host.core.clock import Clock
    from cadre_desktop.host.fleet.peers import Reachability

    class Quiet(Peers):
        answers = False

        async def ask_json(self, computer, method, target, body=None, *, timeout_s=30.0):
            if not self.answers:
                raise LinkDown("gone")
            return 200, {"id": computer.id, "time": "2026-12-07T01:00:00+00:00"}

    peers = Quiet(lambda: keys[1])
    nas = as_computer(keys[0], 9)
    reach = Reachability(peers, lambda: (nas,), Clock())
    reach.asleep(nas.id)
    await reach.check_all()
    assert reach.of(nas.id).state == "asleep" and reach.of(nas.id).since
    peers.answers = True
    await reach.check_all()
    assert reach.of(nas.id).state == "online"
    peers.answers = False
    await reach.check_all()
    assert reach.of(nas.id).state == "unreachable"


def test_a_computer_just_paired_is_online_at_once_not_at_the_next_check(keys):
    """It spoke to us as it paired: shown online now (it was unreachable until the next 4 s check)."""
    from cadre_desktop.host.core.clock import Clock
    from cadre_desktop.host.fleet.peers import Reachability

    told: list[str] = []
    nas = as_computer(keys[0], 9)
    reach = Reachability(Peers(lambda: keys[1]), lambda: (nas,), Clock(), on_change=told.append)
    assert reach.of(nas.id).state == "unreachable"
    reach.heard(nas.id)
    assert reach.of(nas.id).state == "online" and reach.of(nas.id).last_seen and told == [nas.id]
    reach.heard(nas.id)
    assert told == [nas.id]  # no change, no news
