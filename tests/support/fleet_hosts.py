"""Headless hosts of one fleet on this machine: each its own home, keyring file and fleet port on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from tests.support import port_blocks
from tests.support.headless import FLAKY_NODE, HeadlessHost, fast_settings
from tests.support.netns import HomeNetwork
from tests.support.polling import wait_until


def keyring_env(home: Path) -> dict[str, str]:
    """A keyring of its own for each home (tests/support/keyrings.py: FileKeyring)."""
    return {"PYTHON_KEYRING_BACKEND": "tests.support.keyrings.FileKeyring",
            "CADRE_TEST_KEYRING_FILE": str(home.parent / f"{home.name}-keyring.json")}


def fleet_host(root: Path, name: str, net: HomeNetwork | None = None, index: int = 0, **overrides) -> HeadlessHost:
    """`net`: the host is computer `index` of that home network, on its address there."""
    home = root / name
    where = {} if net is None else {"bind_host": net.address(index), "advertise_host": net.address(index)}
    settings = fast_settings(**{"fleet_port": port_blocks.take(3, 20000, 30000), "computer_name": name,
                                "node_command": FLAKY_NODE, **where, **overrides})
    return HeadlessHost(home, keyring_env(home), settings, net, index)


def ok(host: HeadlessHost, method: str, path: str, body: dict | None = None, status: int = 200) -> dict:
    got, doc = host.api(method, path, body)
    assert got == status, (got, doc)
    return doc


def computer(host: HeadlessHost, computer_id: str) -> dict:
    return next(c for c in ok(host, "GET", "/api/fleet")["computers"] if c["id"] == computer_id)


def self_id(host: HeadlessHost) -> str:
    return next(c["id"] for c in ok(host, "GET", "/api/fleet")["computers"] if c["self"])


def wait_state(host: HeadlessHost, computer_id: str, state: str, timeout: float = 15.0) -> dict:
    """Until `host` lists `computer_id` in `state` (a computer introduced by another is listed a
    moment after that one's pairing: waited for too, never a StopIteration)."""
    def listed_so() -> dict | None:
        found = [c for c in ok(host, "GET", "/api/fleet")["computers"] if c["id"] == computer_id]
        return found[0] if found and found[0]["state"] == state else None
    return wait_until(listed_so, timeout=timeout, interval=0.2, what=f"{computer_id} {state} on {host.home.name}")


def all_online(hosts: list[HeadlessHost], ids: dict[str, str], timeout: float = 15.0) -> None:
    """Until every host lists every other computer of `ids` (home name -> computer id) online."""
    for h in hosts:
        for other in set(ids.values()) - {ids[h.home.name]}:
            wait_state(h, other, "online", timeout=timeout)


def fleet_nodes(host: HeadlessHost) -> dict:
    result = host.cli("node", "list", "--all", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@contextlib.contextmanager
def running_hosts(root: Path, *names: str, net: HomeNetwork | None = None, **overrides) -> Iterator[list[HeadlessHost]]:
    """One started host per name (`overrides`: settings of each), each stopped at the end if it
    still runs; `net`: host i is computer i of that home network."""
    hosts = [fleet_host(root, name, net, i, **overrides) for i, name in enumerate(names)]
    try:
        for h in hosts:
            h.start()
        yield hosts
    finally:
        for h in hosts:
            if h.proc and h.proc.poll() is None:
                h.stop()


def pair_by_api(inviter: HeadlessHost, joiner: HeadlessHost) -> None:
    """`joiner` pairs with `inviter` by a code the inviter's control API made."""
    doc = ok(inviter, "POST", "/api/fleet/invite", {}, status=201)
    ok(joiner, "POST", "/api/fleet/join", {"code": doc["code"], "address": doc["address"]})


def store_ready(host: HeadlessHost, timeout: float = 90.0) -> dict:
    """Until `host`'s fleet store is ready: its `GET /api/fleet` then (a time-out says the last state seen)."""
    seen: list[object] = []

    def ready() -> dict | None:
        doc = ok(host, "GET", "/api/fleet")
        seen[:] = [doc["store"]]
        return doc if doc["store"] and doc["store"]["state"] == "ready" else None
    try:
        return wait_until(ready, timeout=timeout, interval=0.5, what=f"the fleet's store ready on {host.home.name}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: last {seen}") from None


def local_node(host: HeadlessHost, node_id: str) -> dict | None:
    """The node's view among `host`'s own nodes (None: it hosts no such node)."""
    return next((n for n in ok(host, "GET", "/api/nodes")["nodes"] if n["id"] == node_id), None)
