"""Lending with the real headless host, real reference nodes, a real Secret Service and the
reference borrower: grant -> donation -> seed -> seeded; a killed lent node comes back the
same node, still seeded; a host killed between request and seed still takes the seed; an
ended loan leaves nothing; wrong, revoked and expired grants are refused."""

from __future__ import annotations

import json
import os
import signal
import socket

import pytest

from tests.support.borrower import borrow, create_grant, free_lend_port, lend_call
from tests.support.headless import fast_settings
from tests.support.node_scan import node_processes
from tests.support.polling import wait_until
from tests.support.secret_items import secret_items, without_home


@pytest.fixture
def lending_host(host_factory):
    def make(**overrides):
        return host_factory(fast_settings(lend_port=free_lend_port(), **overrides))
    return make


def donation(host, donation_id: str) -> dict:
    status, body = host.api("GET", f"/api/donations/{donation_id}")
    assert status == 200, body
    return body


def seeded_and_running(host, donation_id: str, not_pid=None) -> dict:
    def check():
        view = donation(host, donation_id)
        return view if view["status"] == "seeded" and view["running"] and view["pid"] != not_pid else None
    return wait_until(check, timeout=30, what=f"lent node {donation_id} seeded and running")


def entries(keyring_env) -> set[str]:
    """The keyring's cadre-desktop entries, as `<id>/<kind>`."""
    return {without_home(u) for u in secret_items(keyring_env)}


def listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_node_is_lent_seeded_survives_a_crash_and_leaves_nothing_when_the_loan_ends(lending_host, tmp_path,
                                                                                         secret_service):
    host = lending_host().start()
    port = json.loads((host.home / "settings.json").read_text())["lend_port"]
    assert not listens(port), "a host that lends nothing opens no port"
    grant = create_grant(host, label="friends", max_nodes=1)
    assert listens(port)
    result = borrow(grant["link"], "friends", tmp_path / "owner.json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["status"] == "seeded" and view["party_id"] == "friends" and view["peer_id"].startswith("cn1")
    first = seeded_and_running(host, view["id"])
    assert f"{view['id']}/seed-token" in entries(secret_service)

    os.kill(first["pid"], signal.SIGKILL)
    again = seeded_and_running(host, view["id"], not_pid=first["pid"])
    assert again["peer_id"] == first["peer_id"] and again["attempts"] == 1
    status, seen = lend_call(grant["link"], "GET", f"/donations/{view['id']}")
    assert status == 200 and seen["status"] == "seeded" and seen["respawn"]["attempts"] == 1

    status, ended = lend_call(grant["link"], "DELETE", f"/donations/{view['id']}")
    assert (status, ended) == (200, {"id": view["id"], "ended": True})
    assert host.api("GET", f"/api/donations/{view['id']}")[0] == 404
    assert not (host.home / "nodes" / view["id"]).exists()
    assert f"{view['id']}/seed-token" not in entries(secret_service)
    wait_until(lambda: view["id"] not in node_processes(host.home), timeout=10, what="the lent node to stop")
    assert host.stop() == 0


def test_a_host_killed_between_request_and_seed_still_takes_the_seed(lending_host, tmp_path):
    host = lending_host().start()
    grant = create_grant(host)
    asked = borrow(grant["link"], "friends", tmp_path / "owner.json", "--request-only")
    assert asked.returncode == 0, asked.stderr
    donation_id = json.loads(asked.stdout)["id"]
    wait_until(lambda: donation(host, donation_id)["status"] == "awaiting_seed", timeout=20, what="awaiting_seed")
    host.kill()
    host.start()
    seeded = borrow(grant["link"], "friends", tmp_path / "owner.json", "--donation", donation_id)
    assert seeded.returncode == 0, seeded.stderr
    assert json.loads(seeded.stdout)["status"] == "seeded"
    seeded_and_running(host, donation_id)
    assert host.stop() == 0


def test_wrong_revoked_and_expired_grants_are_refused(lending_host, tmp_path, secret_service):
    host = lending_host().start()
    kept = create_grant(host, label="kept")
    revoked = create_grant(host, label="revoked")
    expiring = create_grant(host, label="expiring", expires_in_s=3600)
    wrong = borrow(kept["link"].split("#")[0] + "#" + "x" * 43, "friends", tmp_path / "k.json")
    assert wrong.returncode == 1 and "403 wrong-token" in wrong.stderr
    lent = borrow(expiring["link"], "friends", tmp_path / "k.json", "--request-only")
    assert lent.returncode == 0, lent.stderr
    lent_id = json.loads(lent.stdout)["id"]

    status, _ = host.api("POST", f"/api/grants/{revoked['id']}/revoke", {})
    assert status == 200
    refused = borrow(revoked["link"], "friends", tmp_path / "k.json")
    assert refused.returncode == 1 and "410 grant-revoked" in refused.stderr
    assert f"{revoked['id']}/grant-token" not in entries(secret_service)

    # The expiry passes while the host is down (its file says when): refused, and its loan ended at start.
    assert host.stop() == 0
    doc = json.loads((host.home / "grants.json").read_text())
    doc["grants"][expiring["id"]]["expires_at"] = "2020-01-01T00:00:00.000Z"
    (host.home / "grants.json").write_text(json.dumps(doc))
    host.start()
    expired = borrow(expiring["link"], "friends", tmp_path / "k.json")
    assert expired.returncode == 1 and "410 grant-expired" in expired.stderr
    assert host.api("GET", f"/api/donations/{lent_id}")[0] == 404
    assert not (host.home / "nodes" / lent_id).exists()
    assert lend_call(kept["link"], "GET")[0] == 200

    # Five wrong tokens from one address lock it out, the right token included.
    codes = [lend_call(kept["link"], "GET", token=f"guess-{i}")[0] for i in range(6)]
    assert codes == [403] * 5 + [429]
    assert lend_call(kept["link"], "GET")[0] == 429
    assert host.stop() == 0


def test_the_owner_lends_from_the_command_line(lending_host, tmp_path):
    host = lending_host().start()
    made = host.cli("grant", "create", "--label", "Alice's cadre", "--max-nodes", "2", "--expires-in", "7d")
    assert made.returncode == 0, made.stderr
    link = next(line for line in made.stdout.splitlines() if line.startswith("http://"))
    grant_id = link.split("/grants/")[1].split("#")[0]
    listing = host.cli("grant", "list")
    assert "Alice's cadre" in listing.stdout and "active" in listing.stdout and link.split("#")[1] not in listing.stdout
    qr = host.cli("grant", "link", grant_id, "--qr")
    assert qr.returncode == 0 and qr.stdout.strip().endswith(link) and "▀" in qr.stdout
    assert host.cli("grant", "create", "--max-nodes", "0").returncode == 2
    assert host.cli("grant", "create", "--max-nodes", "99").returncode == 1  # over the host's cap

    lent = borrow(link, "alice", tmp_path / "owner.json")
    assert lent.returncode == 0, lent.stderr
    donation_id = json.loads(lent.stdout)["id"]
    shown = json.loads(host.cli("donation", "show", donation_id, "--json").stdout)
    assert shown["status"] == "seeded" and shown["grant_label"] == "Alice's cadre" and shown["respawnable"]
    assert donation_id in host.cli("donation", "list").stdout
    logs = host.cli("donation", "logs", donation_id, "-n", "500")
    assert logs.returncode == 0 and "seeded" in logs.stdout
    assert host.cli("donation", "retry", donation_id).returncode == 1  # only one in error can be retried
    assert host.cli("donation", "end", donation_id).returncode == 2  # no terminal to confirm on
    ended = host.cli("donation", "end", "--yes", donation_id)
    assert ended.returncode == 0 and "Ended the loan" in ended.stdout
    revoked = host.cli("grant", "revoke", "--yes", grant_id, "--json")
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["status"] == "revoked"
    assert host.cli("grant", "link", grant_id).returncode == 1
    assert host.stop() == 0


def test_the_event_stream_carries_grant_and_donation_events_with_their_views(lending_host, tmp_path):
    from cadre_desktop.cli.client import ControlClient

    host = lending_host().start()
    events = ControlClient.from_file(host.home / "control.json").events()
    grant = create_grant(host, label="watched")
    kind, data = next(events)
    assert kind == "grant_added" and data["grant"]["label"] == "watched" and "link" not in data["grant"]
    kind, data = next(events)  # the first grant opened the lend API: every active grant's view changed
    assert kind == "grant_changed" and data["grant"]["lend_api"]["listening"], data
    lent = borrow(grant["link"], "friends", tmp_path / "owner.json", "--request-only")
    assert lent.returncode == 0, lent.stderr
    donation_id = json.loads(lent.stdout)["id"]
    seen = []
    for kind, data in events:
        seen.append(kind)
        if kind == "donation_changed" and (data["donation"] or {}).get("status") == "awaiting_seed":
            break
    assert seen[0] == "donation_added" and data["id"] == donation_id
    assert grant["link"].split("#")[1] not in json.dumps(data)
    assert host.stop() == 0


def test_a_lent_node_paused_by_its_owner_is_paused_by_its_host_for_the_borrower(lending_host, tmp_path):
    host = lending_host().start()
    grant = create_grant(host, label="friends", max_nodes=1)
    result = borrow(grant["link"], "friends", tmp_path / "owner.json")
    assert result.returncode == 0, result.stderr
    lent = seeded_and_running(host, json.loads(result.stdout)["id"])
    status, paused = host.api("POST", f"/api/donations/{lent['id']}/pause", {})
    assert status == 200, paused
    assert paused["status"] == "paused" and not paused["running"] and paused["held_by"] == "person"
    wait_until(lambda: lent["id"] not in node_processes(host.home), timeout=10, what="the lent node stopped")
    status, seen = lend_call(grant["link"], "GET", f"/donations/{lent['id']}")
    assert status == 200 and seen["status"] == "paused" and seen["held_by"] == "host"
    status, resumed = host.api("POST", f"/api/donations/{lent['id']}/resume")
    assert status == 200, resumed
    back = seeded_and_running(host, lent["id"], not_pid=lent["pid"])
    assert back["attempts"] == 0 and back["held_by"] is None
    assert host.stop() == 0


def test_the_owner_is_told_when_the_lend_port_is_taken_and_when_it_is_free_again(lending_host):
    """`grant create`, `grant list`, the control API and doctor say nobody can reach the grant."""
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    host = lending_host().start()
    port = json.loads((host.home / "settings.json").read_text())["lend_port"]
    squatter.bind(("127.0.0.1", port))
    squatter.listen(1)
    try:
        made = host.cli("grant", "create", "--label", "unreachable")
        assert made.returncode == 0, made.stderr
        assert "Warning: borrowers cannot reach this host" in made.stdout and "lend_port" in made.stdout, made.stdout
        listing = host.cli("grant", "list")
        assert "active (unreachable)" in listing.stdout and "Warning:" in listing.stdout, listing.stdout
        grant = json.loads(host.cli("grant", "list", "--json").stdout)["grants"][0]
        assert grant["lend_api"]["listening"] is False and grant["lend_api"]["address"] == f"127.0.0.1:{port}"
        assert "cannot listen" in grant["lend_api"]["error"] and grant["unreachable"]
        checked = host.cli("doctor")
        line = next(x for x in checked.stdout.splitlines() if "lend API:" in x)
        assert line.startswith("warn") and "cannot reach" in line, checked.stdout
    finally:
        squatter.close()

    def listening() -> dict | None:
        view = host.api("GET", f"/api/grants/{grant['id']}")[1]
        return view if view["lend_api"]["listening"] else None
    view = wait_until(listening, timeout=30, what="the lend API listening once its port is free")
    assert view["unreachable"] is None and view["lend_api"]["error"] is None
    assert "(unreachable)" not in host.cli("grant", "list").stdout
    assert listens(port)
    checked = host.cli("doctor")
    assert any(x.startswith("ok") and "lend API: listening on" in x for x in checked.stdout.splitlines()), \
        checked.stdout


def test_a_borrower_with_a_dead_link_is_told_in_words(lending_host, tmp_path):
    """The only grant revoked: the lend API closes, and the borrower hears why a link may be dead."""
    host = lending_host().start()
    grant = create_grant(host, label="short-lived")
    assert host.api("POST", f"/api/grants/{grant['id']}/revoke")[0] == 200
    port = json.loads((host.home / "settings.json").read_text())["lend_port"]
    wait_until(lambda: not listens(port), timeout=10, what="the lend API closed")
    refused = borrow(grant["link"], "friends", tmp_path / "owner.json")
    assert refused.returncode == 1
    assert "this link no longer works: the grant may be revoked or expired, or the lender's computer is off" \
        in refused.stderr, refused.stderr
    assert "Connection refused" not in refused.stderr and grant["link"].split("#")[1] not in refused.stderr
