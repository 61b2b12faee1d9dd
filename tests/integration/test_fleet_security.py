"""The fleet link refuses whoever is not paired, before a request is read, and says so once in the log.

Two real headless hosts (their own homes, keyrings and fleet ports on 127.0.0.1); the test's
own clients speak TLS (or not) with keys of their own, or with a key the host unpinned.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl

import pytest

from cadre_desktop.host.fleet.identity import Identity, client_context, make_identity
from cadre_desktop.host.fleet.link import read_frame, write_frame
from cadre_desktop.host.fleet.pairing_code import parse_code
from cadre_desktop.host.fleet.pake import JoinerSession
from tests.support.fleet_hosts import fleet_host, ok, pair_by_api, running_hosts, self_id, wait_state
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(180)


def paired(folder):
    with running_hosts(folder, "alpha", "bravo") as (a, b):
        pair_by_api(a, b)
        wait_state(a, self_id(b), "online")
        yield a, b


@pytest.fixture
def pair(tmp_path):
    """A pair of its own, for a test that changes it (a key removed, a code opened)."""
    yield from paired(tmp_path)


@pytest.fixture(scope="module")
def shared_pair(tmp_path_factory):
    """One pair for the tests that only knock at its door (each counts refusals of its own words)."""
    yield from paired(tmp_path_factory.mktemp("fleet-pair"))


def fleet_port(host) -> int:
    return json.loads((host.home / "settings.json").read_text())["fleet_port"]


def ask(port: int, identity: Identity | None, trusted: str | None) -> bytes:
    """A TLS 1.3 client's GET /fleet/hello: the bytes it got back (b"" when the server closed)."""
    ctx = client_context(identity, trusted)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"GET /fleet/hello HTTP/1.1\r\nHost: x\r\n\r\n")
                return tls.recv(4096)
        except (ssl.SSLError, ConnectionError):
            return b""


def refusals(host, words: str) -> int:
    return sum(1 for line in host.stderr().splitlines() if "fleet link: refused" in line and words in line)


def alpha_cert(host) -> str:
    return json.loads((host.home / "fleet.json").read_text())["self_cert"]


def stolen_identity(host) -> Identity:
    """Bravo's own key and certificate, read where they are kept (its keyring file, its fleet.json)."""
    fleet = json.loads((host.home / "fleet.json").read_text())
    keys = json.loads((host.home.parent / f"{host.home.name}-keyring.json").read_text())
    key = next(v for k, v in keys.items() if k.endswith("/fleet-key"))
    return Identity(fleet["self_id"], fleet["self_cert"], key)


def test_a_paired_computers_key_is_let_in(shared_pair):
    a, b = shared_pair
    got = ask(fleet_port(a), stolen_identity(b), alpha_cert(a))
    assert got.startswith(b"HTTP/1.1 200"), got


def test_an_unpaired_client_is_refused_in_the_handshake_and_logged_once(shared_pair):
    a, _ = shared_pair
    stranger = make_identity("pc_stranger2345")
    assert ask(fleet_port(a), stranger, alpha_cert(a)) == b""
    wait_until(lambda: refusals(a, "does not pin") == 1, timeout=10, what="one refusal logged")
    assert stranger.key.splitlines()[1] not in a.stderr()


def test_a_client_with_no_key_is_refused_when_no_code_is_open(pair):
    a, _ = pair
    assert ask(fleet_port(a), None, alpha_cert(a)) == b""
    wait_until(lambda: refusals(a, "no pairing code is open") == 1, timeout=10, what="one refusal logged")


def test_a_removed_computers_key_is_refused(pair):
    a, b = pair
    kept = stolen_identity(b)
    b.stop()  # unreachable: alpha unpins it here only
    done = ok(a, "DELETE", f"/api/fleet/computers/{kept.computer_id}")
    assert done["unpaired_there"] is False
    assert ask(fleet_port(a), kept, alpha_cert(a)) == b""
    wait_until(lambda: refusals(a, "does not pin") == 1, timeout=10, what="one refusal logged")
    assert kept.computer_id not in {c["id"] for c in ok(a, "GET", "/api/fleet")["computers"]}


def test_plain_http_on_the_fleet_port_is_refused_and_logged_once(shared_pair):
    a, _ = shared_pair
    with socket.create_connection(("127.0.0.1", fleet_port(a)), timeout=10) as raw:
        raw.sendall(b"GET /api/nodes HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            got = raw.recv(4096)
        except ConnectionError:
            got = b""
    assert b"nodes" not in got
    wait_until(lambda: refusals(a, "not a TLS 1.3 handshake") == 1, timeout=10, what="one refusal logged")


def test_wrong_codes_are_refused_and_burn_the_code_after_three(pair, tmp_path):
    a, _ = pair
    c = fleet_host(tmp_path, "charlie")
    c.start()
    try:
        doc = ok(a, "POST", "/api/fleet/invite", {}, status=201)
        slot, right = doc["code"].split("-", 1)
        wrong = f"{slot}-{'2222-2222' if right != '2222-2222' else '3333-3333'}"
        for _ in range(3):
            status, body = c.api("POST", "/api/fleet/join", {"code": wrong, "address": doc["address"]})
            assert status == 409 and body["error"]["code"] == "pairing_refused", body
        status, body = c.api("POST", "/api/fleet/join", {"code": doc["code"], "address": doc["address"]})
        assert status == 409, body  # burnt: even the right code is refused now
        assert len(ok(c, "GET", "/api/fleet")["computers"]) == 1
        assert json.loads((c.home / "fleet.json").read_text())["self_cert"] is None  # nothing kept on the joiner
        assert len(ok(a, "GET", "/api/fleet")["computers"]) == 2
        for host in (a, c):
            assert doc["code"] not in host.stderr() and right not in host.stderr()
        assert sum("refused a pairing try" in line for line in a.stderr().splitlines()) >= 3
    finally:
        c.stop()


def test_a_replayed_pairing_transcript_is_refused(pair):
    a, _ = pair
    doc = ok(a, "POST", "/api/fleet/invite", {}, status=201)
    me = make_identity("pc_replayer2345")
    mine = {"id": me.computer_id, "name": "replayer", "address": "127.0.0.1:9", "cert": me.cert}

    async def session(frames: list[dict] | None) -> tuple[list[dict], dict]:
        reader, writer = await asyncio.open_connection("127.0.0.1", fleet_port(a), ssl=client_context(None, None),
                                                       server_hostname="")
        try:
            if frames is None:  # a real joiner, recorded, that stops before its confirmation
                joiner = JoinerSession(parse_code(doc["code"]), mine)
                sent = [joiner.hello()]
                await write_frame(writer, sent[0])
                sent.append(joiner.on_pake(await read_frame(reader)))
                await write_frame(writer, sent[1])
                return sent, await read_frame(reader)
            await write_frame(writer, frames[0])
            await read_frame(reader)  # the inviter's fresh SPAKE2 message
            await write_frame(writer, frames[1])
            return frames, await read_frame(reader)
        finally:
            writer.close()

    recorded, answer = asyncio.run(session(None))
    assert answer["t"] == "sealed"
    _, replayed = asyncio.run(session(recorded))
    assert replayed["t"] == "refused" and "wrong" in replayed["message"]
    assert me.computer_id not in {c["id"] for c in ok(a, "GET", "/api/fleet")["computers"]}
