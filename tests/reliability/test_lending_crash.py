"""Crash consistency of lending: a host SIGKILLed at random moments while it lends.

Each round starts the real headless host, fires grant creates and revokes at
its control API and donation requests, seeds and ends at its lend API (as a
borrower does), and SIGKILLs it after a random delay, usually mid-call. After
each restart: the files parse, every acknowledged change is there, nothing is
left half-done, keyring entries and rows agree one to one (a grant token per
open grant, a seed token per lent node), and once settled every lent node has
exactly one child, on its own ports.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cadre_desktop.wire.keys import b64url
from cadre_desktop.wire.seed import sign_seed
from tests.support.borrower import free_lend_port, lend_call
from tests.support.headless import host_settings
from tests.support.host_calls import call
from tests.support.host_files import parse_versioned
from tests.support.node_scan import node_processes, read_json, wait_settled
from tests.support.polling import wait_until
from tests.support.secret_items import node_of, secret_items, without_home

ROUNDS = 6
BUDGET_S = 40.0
OWNER = Ed25519PrivateKey.generate()
OWNER_KEY = b64url(OWNER.public_key().public_bytes_raw())


@dataclass
class Ledger:
    grants: dict[str, str] = field(default_factory=dict)  # acknowledged grant id -> link
    revoked: set[str] = field(default_factory=set)
    lent: dict[str, str] = field(default_factory=dict)  # acknowledged donation id -> grant id
    ended: set[str] = field(default_factory=set)
    seeded: set[str] = field(default_factory=set)
    acked: int = 0


def lend(host, ledger: Ledger, rng) -> bool:
    """One random lending change; False once the host is gone (or an answer was lost)."""
    open_grants = [g for g in ledger.grants if g not in ledger.revoked]
    live = [d for d in ledger.lent if d not in ledger.ended]
    ops = ["grant"] * (2 if len(open_grants) < 2 else 0) + ["request"] * (3 if open_grants and len(live) < 3 else 0)
    ops += ["seed"] * (2 if live else 0) + ["end"] * (1 if live else 0) + ["revoke"] * (1 if open_grants else 0)
    op = rng.choice(ops)
    try:
        if op == "grant":
            answer = call(host, "POST", "/api/grants", {"label": f"crash {rng.randrange(1000)}", "max_nodes": 3})
            if answer is None:
                return False
            assert answer[0] == 201, answer
            ledger.grants[answer[1]["id"]] = answer[1]["link"]
        elif op == "revoke":
            grant_id = rng.choice(open_grants)
            answer = call(host, "POST", f"/api/grants/{grant_id}/revoke", {})
            if answer is None:
                return False
            assert answer[0] == 200, answer
            ledger.revoked.add(grant_id)
            ledger.ended |= {d for d, g in ledger.lent.items() if g == grant_id}
        elif op == "request":
            grant_id = rng.choice(open_grants)
            status, body = lend_call(ledger.grants[grant_id], "POST", "/donations",
                                     {"party_id": "crashers", "owner_keys": [OWNER_KEY]})
            if status == 409:
                return True  # full
            if status == 410:
                return revoked_meanwhile(ledger, grant_id)
            assert status == 201, body
            ledger.lent[body["id"]] = grant_id
        else:
            donation_id = rng.choice(live)
            link = ledger.grants[ledger.lent[donation_id]]
            if op == "end":
                status, body = lend_call(link, "DELETE", f"/donations/{donation_id}")
                if status == 410:
                    return revoked_meanwhile(ledger, ledger.lent[donation_id])
                assert status in (200, 404), body
                ledger.ended.add(donation_id)
                return True
            status, view = lend_call(link, "GET", f"/donations/{donation_id}")
            if status == 410:
                return revoked_meanwhile(ledger, ledger.lent[donation_id])
            if status != 200 or not view.get("peer_id") or view["status"] not in ("awaiting_seed", "seeded"):
                return True
            seed = sign_seed(OWNER.private_bytes_raw(), donation_id, "crashers", view["peer_id"]).to_json()
            status, body = lend_call(link, "POST", f"/donations/{donation_id}/seed", {"seed": seed})
            if status == 200:
                ledger.seeded.add(donation_id)
            else:
                assert status in (409, 503), body
        ledger.acked += 1
        return True
    except OSError:  # a lend API call whose answer was lost: the host died
        wait_until(lambda: host.proc.poll() is not None, timeout=5, what="the host to be dead")
        return False


def revoked_meanwhile(ledger: Ledger, grant_id: str) -> bool:
    """A revoke whose answer a crash lost did happen (the lend API says 410): take it as done."""
    ledger.revoked.add(grant_id)
    ledger.ended |= {d for d, g in ledger.lent.items() if g == grant_id}
    return True


def check_after_restart(host, ledger: Ledger, keyring_env, baseline: set[str]) -> None:
    home = host.home
    grants = parse_versioned(home / "grants.json")["grants"] if (home / "grants.json").exists() else {}
    donations_doc = parse_versioned(home / "donations.json") if (home / "donations.json").exists() else {}
    donations = donations_doc.get("donations", {})
    assert not donations_doc.get("removing"), "an end of loan was left unfinished after the start-up reap"
    items = {without_home(u): s for u, s in secret_items(keyring_env).items() if u not in baseline}
    for grant_id, row in grants.items():
        assert not row.get("creating"), f"grant {grant_id} left half-created"
        has_token = f"{grant_id}/grant-token" in items
        assert has_token == (row["closed_at"] is None), f"grant {grant_id}: token {has_token}, closed {row['closed_at']}"
    for donation_id, row in donations.items():
        assert row["status"] != "provisioning" or row["handle"], f"{donation_id} left provisioning without a child"
        assert f"{donation_id}/seed-token" in items, f"lent node {donation_id} has no seed token"
        assert grants.get(row["grant_id"], {}).get("closed_at") is None, f"{donation_id} outlived its grant"
    for user in items:
        assert node_of(user) in grants or node_of(user) in donations, f"keyring entry {user} has no row"
    for grant_id in ledger.grants:
        assert grant_id in grants, f"acknowledged grant {grant_id} is missing"
    for grant_id in ledger.revoked:
        assert grants[grant_id]["revoked_at"], f"acknowledged revoke of {grant_id} was undone"
    for donation_id in ledger.ended:
        assert donation_id not in donations, f"acknowledged end of {donation_id} was undone"
        assert not (home / "nodes" / donation_id).exists(), f"ended loan {donation_id} kept its folder"
    for donation_id in set(ledger.lent) - ledger.ended:
        if donation_id not in donations:  # only the reaper may have ended it, for a reason it logs
            ledger.ended.add(donation_id)
    for donation_id in ledger.seeded & set(donations):
        assert donations[donation_id]["status"] in ("seeded", "error"), f"{donation_id} lost its seed"


def test_sigkilled_host_keeps_every_acknowledged_loan_change_and_nothing_half_done(hosts, rng, secret_service):
    baseline = set(secret_items(secret_service))
    host = hosts(host_settings(rng, lend_port=free_lend_port(), respawn_max_attempts=3))
    ledger = Ledger()
    started, rounds = time.monotonic(), 0
    tracked: set[int] = set()
    while rounds < ROUNDS and time.monotonic() - started < BUDGET_S:
        rounds += 1
        host.start()
        if rounds > 1:
            check_after_restart(host, ledger, secret_service, baseline)
        pid = host.proc.pid
        killer = threading.Timer(rng.uniform(0.2, 2.5), lambda: os.kill(pid, signal.SIGKILL))
        killer.start()
        try:
            while lend(host, ledger, rng):
                pass
        finally:
            killer.cancel()
        host.proc.wait(timeout=10)
        host.kill()
        for name in ("grants.json", "donations.json"):  # right after the crash: whole files only
            if (host.home / name).exists():
                parse_versioned(host.home / name)
        tracked |= {row["pid"] for row in (read_json(host.home / "state.json") or {"handles": {}})["handles"].values()}
    host.start()
    check_after_restart(host, ledger, secret_service, baseline)
    print(f"{rounds} rounds, {ledger.acked} acknowledged changes, {len(ledger.lent)} nodes lent")
    assert rounds >= 3 and ledger.acked >= 8, "too little happened to prove anything"
    wait_settled(host.home, tracked)
    assert host.stop() == 0
    wait_until(lambda: not node_processes(host.home), timeout=10, what="every node to stop with the host")
