"""A fleet of three real headless hosts with one claimed failover node on bravo, for the never-twice rounds."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path

import psutil

from tests.support.fleet_hosts import all_online, pair_by_api, running_hosts, self_id
from tests.support.headless import HeadlessHost, added, running_node
from tests.support.host_calls import claim
from tests.support.netns import HomeNetwork
from tests.support.never_twice import listed_ports
from tests.support.never_twice_rounds import STORE_S, StoresNotReady, local_ready, store_ready
from tests.support.polling import wait_until


def end_strays(root: Path) -> list[int]:
    """Kill what a kill -9'd host left running under `root` (its etcd member, its nodes): the pids ended."""
    ended, me = [], os.getpid()  # never this process (a bench told `--keep ROOT` names it in its own command line)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.info["pid"] != me and any(str(root) in part for part in proc.info["cmdline"] or ()):
                proc.kill()
                ended.append(proc.pid)
        except psutil.Error:
            pass
    return ended


def copies(hosts: list[HeadlessHost], node_id: str) -> set[int | str]:
    """Every copy of the node the hosts list now: its port on 127.0.0.1, or "address:port" for a
    host on a home network (asked from inside its namespace, bounded)."""
    found: set[int | str] = set()
    for h in hosts:
        if h.net is None:
            found |= listed_ports(h.home, node_id)
            continue
        try:
            ports = h.net.call_in(h.net_index, lambda h=h: listed_ports(h.home, node_id), timeout=5.0)  # type: ignore[misc]
        except TimeoutError:
            continue
        found |= {f"{h.net.address(h.net_index)}:{p}" for p in ports}
    return found


@contextlib.contextmanager
def fleet_with_failover_node(root: Path, lease_ms: int,
                             net: HomeNetwork | None = None) -> Iterator[tuple[list[HeadlessHost], str]]:
    """`net`: each host in its namespace of that home network (the ``partition`` fault needs it)."""
    try:
        with _fleet(root, lease_ms, net) as got:
            yield got
    finally:
        end_strays(root)


@contextlib.contextmanager
def _fleet(root: Path, lease_ms: int, net: HomeNetwork | None) -> Iterator[tuple[list[HeadlessHost], str]]:
    with running_hosts(root, "alpha", "bravo", "charlie", net=net, fleet_lease_ms=lease_ms) as hosts:
        a, b, c = hosts
        ids = {h.home.name: self_id(h) for h in hosts}
        node = added(b, "Study")
        view = running_node(b, node["id"])
        claimed = net.call_in(None, lambda: claim(view, "family")) if net is not None else claim(view, "family")
        assert claimed[0] == 200
        pair_by_api(a, b)
        pair_by_api(a, c)
        all_online(hosts, ids, timeout=30)
        for h in hosts:
            try:
                wait_until(functools.partial(store_ready, h), timeout=STORE_S, interval=0.5,
                           what=f"the store ready on {h.home.name}")
            except AssertionError as exc:
                raise StoresNotReady(f"the fleet's store never formed: {exc}") from None
        turned = b.cli("node", "set", node["id"], "--failover", "on", "--json")
        assert turned.returncode == 0, turned.stderr
        wait_until(lambda: (v := local_ready(b, node["id"])) and v["failover"] and v["generation"], timeout=30,
                   interval=0.2, what="the node under its lease on bravo")
        for h in (a, c):
            replica = h.home / "replicas" / node["id"] / "replica.bin"
            wait_until(replica.is_file, timeout=30, interval=0.2, what=f"the replica on {h.home.name}")
        yield hosts, node["id"]
