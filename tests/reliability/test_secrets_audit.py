"""Secrets audit: after a full life cycle, no secret is anywhere it should not be.

The life cycle: add (API and CLI), a new claim code, a claim from a "phone",
invitations minted by the claimed node and redeemed through the API and the
CLI, an invitation that fails, node and host crashes, a give-up, a retry, and
removal of everything. Every secret, token and invitation used is collected;
then every file under the home (records, state, node folders, logs, the host's
stderr) is searched for each, as are `ps` output, the host's command line and
environment, and the nodes' command lines. The only places allowed are the
keyring, each node's own environment (its own secret only), and control.json
(the running host's current token only).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import urllib.parse
from collections.abc import Set as AbstractSet
from pathlib import Path

import psutil
import pytest

from cadre_desktop.node.cadre.invitation_code import InvitationCode, parse_invitation
from tests.support.headless import host_settings
from tests.support.host_calls import answered, claim, claim_secret_of, post_json, running
from tests.support.node_scan import node_processes
from tests.support.polling import wait_until
from tests.support.secret_items import entry_name, node_of, secret_items, without_home


class Vault:
    """Every secret the test saw, by a name to report it under (never the value)."""

    def __init__(self) -> None:
        self.found: dict[str, str] = {}

    def add(self, name: str, value: str | None) -> None:
        assert value, f"{name} is empty"
        self.found[name] = value
        if value.startswith("cadre-inv1."):
            self.found[name + " (its inner secret)"] = parse_invitation(value).secret

    def forms(self, value: str) -> set[bytes]:
        return {value.encode(), urllib.parse.quote(value, safe="").encode(), json.dumps(value)[1:-1].encode()}

    def leaks_in(self, data: bytes, allowed: AbstractSet[str] = frozenset()) -> list[str]:
        return [name for name, value in self.found.items()
                if name not in allowed and any(form in data for form in self.forms(value))]


def scan_home(home: Path, vault: Vault, control_token_name: str | None) -> list[str]:
    problems = []
    for path in sorted(p for p in home.rglob("*") if p.is_file()):
        allowed = {control_token_name} if path == home / "control.json" and control_token_name else set()
        for name in vault.leaks_in(path.read_bytes(), allowed):
            problems.append(f"{name} in {path.relative_to(home)}")
    return problems


def child_leaks(vault: Vault, node_id: str, child: psutil.Process) -> list[str]:
    """A node process's command line and environment: any secret but its own is a leak."""
    problems = [f"{name} in node {node_id}'s command line" for name in vault.leaks_in("\0".join(child.cmdline()).encode())]
    env = child.environ()
    own = {n for n, v in vault.found.items()
           if v in (env.get("CADRE_CLAIM_SECRET"), env.get("CADRE_INVITATION"), env.get("CADRE_SEED_TOKEN"))}
    own |= {n + " (its inner secret)" for n in own}
    return problems + [f"{name} in node {node_id}'s environment (not its own secret)"
                       for name in vault.leaks_in(Path(f"/proc/{child.pid}/environ").read_bytes(), own)]


def scan_processes(host, vault: Vault) -> list[str]:
    problems = []
    ps = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, timeout=10).stdout
    problems += [f"{name} in `ps` output" for name in vault.leaks_in(ps)]
    proc = psutil.Process(host.proc.pid)
    problems += [f"{name} in the host's command line" for name in vault.leaks_in("\0".join(proc.cmdline()).encode())]
    environ = Path(f"/proc/{host.proc.pid}/environ").read_bytes()
    problems += [f"{name} in the host's environment" for name in vault.leaks_in(environ)]
    for node_id, procs in node_processes(host.home).items():
        for child in procs:
            try:
                problems += child_leaks(vault, node_id, child)
            except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
                continue  # it ended between the listing and the look (a failed join, a parked child taken)
    for proc in psutil.process_iter():
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        except OSError:
            continue
        if b"CADRE_STANDBY=1" in environ.split(b"\0"):  # standbys and the nodes they became
            problems += [f"{name} in the exec-time environment of standby {proc.pid}"
                         for name in vault.leaks_in(environ)]
    return problems


def joined(host, node_id: str) -> dict:
    return wait_until(lambda: (n := host.node(node_id))["status"] == "joined" and n["running"] and n,
                      timeout=30, what=f"node {node_id} joined")


def mint(view: dict, owner_token: str) -> str:
    status, body = post_json(f"http://127.0.0.1:{view['api_port']}/invitations", {}, token=owner_token)
    assert status == 201, body
    return body["invitation"]


@pytest.mark.parametrize("warm_standby", [False, True], ids=["cold", "warm"])
def test_no_secret_outside_the_keyring_and_the_nodes_own_environment(hosts, rng, secret_service, warm_standby):
    """Warm: every start after the first takes a standby, whose secrets come through a pipe."""
    vault = Vault()
    host = hosts(host_settings(rng, respawn_max_attempts=2, warm_standby=warm_standby)).start()
    vault.add("control token of the first host", host.control["token"])

    # Add, through the API and the CLI; a new claim code for the second.
    a = running(host, answered(host, "POST", "/api/nodes", {"name": "Alpha"})[1]["id"])
    vault.add("claim secret of A", claim_secret_of(a))
    cli = host.cli("node", "add", "--name", "Gamma", "--json")
    assert cli.returncode == 0, cli.stderr
    c = running(host, json.loads(cli.stdout)["id"])
    vault.add("first claim secret of C", claim_secret_of(c))
    cli = host.cli("node", "regenerate", c["id"], "--json")
    assert cli.returncode == 0, cli.stderr
    vault.add("second claim secret of C", claim_secret_of(json.loads(cli.stdout)))
    listing = host.cli("node", "list")
    assert not vault.leaks_in(listing.stdout.encode()), "`node list` shows a claim code"

    # A phone claims A; A's owner mints invitations; B joins by API, D by the CLI.
    status, body = claim(a, "audit family")
    assert status == 200, body
    vault.add("owner token of A", body["owner_token"])
    a = joined(host, a["id"])
    first = mint(a, vault.found["owner token of A"])
    vault.add("invitation for B", first)
    b = answered(host, "POST", "/api/nodes/join", {"invitation": first, "name": "Beta"})[1]
    second = mint(a, vault.found["owner token of A"])
    vault.add("invitation for D", second)
    cli = host.cli("node", "join", "--name", "Delta", "--json", input=second + "\n")
    assert cli.returncode == 0, cli.stderr
    d = json.loads(cli.stdout)
    joined(host, b["id"])
    joined(host, d["id"])
    # An invitation the inviting node never issued: the join fails, and says why.
    bogus = InvitationCode(host="127.0.0.1", port=a["api_port"], id=secrets.token_urlsafe(12),
                           secret=secrets.token_urlsafe(32), peer=a["peer_id"]).encode()
    vault.add("invitation that fails", bogus)
    e = answered(host, "POST", "/api/nodes/join", {"invitation": bogus, "name": "Epsilon"})[1]
    failed = wait_until(lambda: (n := host.node(e["id"]))["status"] == "error" and n, timeout=30,
                        what="the bogus join to fail")
    assert "invitation failed" in failed["last_error"]
    problems = scan_processes(host, vault)
    # The scanner sees what it looks for: A's own secret is in A's environment (allowed there).
    a_env = Path(f"/proc/{host.node(a['id'])['pid']}/environ").read_bytes()
    warm = b"CADRE_STANDBY=1" in a_env.split(b"\0")  # told through a pipe: its secret is not there
    assert vault.leaks_in(a_env) == ([] if warm else ["claim secret of A"])

    # Crashes: a node, then the host (a new host, a new token).
    os.kill(host.node(b["id"])["pid"], signal.SIGKILL)
    joined(host, b["id"])
    host.proc.send_signal(signal.SIGKILL)
    host.proc.wait(10)
    host.kill()
    host.start()
    vault.add("control token of the second host", host.control["token"])
    for node_id in (a["id"], b["id"], c["id"], d["id"]):
        wait_until(lambda: host.node(node_id)["running"], timeout=20, what=f"{node_id} back")

    # A give-up and a retry.
    (host.home / "nodes" / c["id"] / "crash").touch()
    os.kill(host.node(c["id"])["pid"], signal.SIGKILL)
    wait_until(lambda: host.node(c["id"])["status"] == "error", timeout=30, what="the give-up")
    (host.home / "nodes" / c["id"] / "crash").unlink()
    assert answered(host, "POST", f"/api/nodes/{c['id']}/retry")[0] == 200
    running(host, c["id"])
    if warm_standby:
        born_warm = [n for n in (a["id"], b["id"], c["id"], d["id"]) if b"CADRE_STANDBY=1" in
                     Path(f"/proc/{host.node(n)['pid']}/environ").read_bytes().split(b"\0")]
        assert born_warm, "no start took a standby: the hand-over went unaudited"

    problems += scan_processes(host, vault)
    problems += scan_home(host.home, vault, "control token of the second host")
    assert set(secret_items(secret_service)) >= {
        entry_name(host.home, a["id"]), entry_name(host.home, b["id"], "invitation"),
        entry_name(host.home, c["id"]), entry_name(host.home, d["id"], "invitation")}

    # Remove everything (API and CLI), stop, and look again.
    for node_id in (a["id"], b["id"], e["id"]):
        assert answered(host, "DELETE", f"/api/nodes/{node_id}")[0] == 200
    for node_id in (c["id"], d["id"]):
        cli = host.cli("node", "remove", "--yes", node_id)
        assert cli.returncode == 0, cli.stderr
    assert host.stop() == 0
    problems += scan_home(host.home, vault, None)
    gone = {a["id"], b["id"], c["id"], d["id"], e["id"]}
    assert not [u for u in secret_items(secret_service) if node_of(u) in gone], "keyring entries outlived their nodes"
    assert not problems, problems


def test_no_lending_secret_outside_the_keyring_and_the_lent_nodes_own_environment(hosts, rng, secret_service,
                                                                                 tmp_path):
    """Grants (API and CLI), links, borrowers, seeds, crashes of a lent node and of the host, a revoke
    and an end: no grant token, seed token or borrower key is anywhere it should not be."""
    import urllib.parse as up

    from tests.support.borrower import borrow, free_lend_port, lend_call

    vault = Vault()
    host = hosts(host_settings(rng, lend_port=free_lend_port())).start()
    vault.add("control token of the first host", host.control["token"])
    status, first = answered(host, "POST", "/api/grants", {"label": "first"})
    assert status == 201, first
    vault.add("grant token of the first grant", up.urlsplit(first["link"]).fragment)
    cli = host.cli("grant", "create", "--label", "second", "--json")
    assert cli.returncode == 0, cli.stderr
    second = json.loads(cli.stdout)
    vault.add("grant token of the second grant", up.urlsplit(second["link"]).fragment)
    assert not vault.leaks_in(host.cli("grant", "list").stdout.encode()), "`grant list` shows a grant link"
    assert host.cli("grant", "link", second["id"]).stdout.strip() == second["link"]

    key = tmp_path / "borrower-key.json"
    lent = borrow(first["link"], "auditors", key)
    assert lent.returncode == 0, lent.stderr
    a = json.loads(lent.stdout)
    vault.add("the borrower's owner key", json.loads(key.read_text())["private_key"])
    asked = borrow(second["link"], "auditors", key, "--request-only")
    assert asked.returncode == 0, asked.stderr
    b = json.loads(asked.stdout)
    items = {without_home(u): v for u, v in secret_items(secret_service).items()}
    for d in (a, b):
        vault.add(f"seed token of {d['id']}", items[f"{d['id']}/seed-token"])

    # Crashes: a lent node, then the host; the second node is seeded after the restart.
    pid = answered(host, "GET", f"/api/donations/{a['id']}")[1]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: (v := answered(host, "GET", f"/api/donations/{a['id']}")[1])["running"] and v["pid"] != pid,
               timeout=30, what="the lent node back")
    host.kill()
    host.start()
    vault.add("control token of the second host", host.control["token"])
    seeded = borrow(second["link"], "auditors", key, "--donation", b["id"])
    assert seeded.returncode == 0, seeded.stderr
    problems = scan_processes(host, vault)
    problems += scan_home(host.home, vault, "control token of the second host")
    wrong = lend_call(first["link"], "GET", token=vault.found["grant token of the second grant"])
    assert wrong[0] == 403 and not vault.leaks_in(json.dumps(wrong[1]).encode())

    # A revoke and an end (CLI), then stop and look again.
    assert answered(host, "POST", f"/api/grants/{first['id']}/revoke", {})[0] == 200
    cli = host.cli("donation", "end", "--yes", b["id"])
    assert cli.returncode == 0, cli.stderr
    assert host.stop() == 0
    problems += scan_home(host.home, vault, None)
    left = [u for u in secret_items(secret_service) if node_of(u) in {first["id"], a["id"], b["id"]}]
    assert not left, f"keyring entries outlived their grant or loan: {left}"
    assert not problems, problems
