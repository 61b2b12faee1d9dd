"""Rounds of faults on a fleet of real headless hosts, the checker of never twice polling throughout.

`fleet_with_failover_node` starts three hosts, pairs them, claims a node on the second and turns
failover on; `run_rounds` applies one fault per round (tests/support/never_twice.py) to the
computer holding the node, waits (bounded) until the node serves again and every store is ready,
and returns what each round saw (fault, computer, seconds from the fault to serving again).

A store that is not ready again within `STORE_S` is not what this checker checks (the etcd
member and its client are the store's own: issue 36's open store findings): its host is stopped
and started again, once, and the round says so (`Round.healed`); one that stays unready then
raises `StoresNotReady`, after which the caller still checks the answers it has.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.support.fleet_hosts import ok
from tests.support.headless import HeadlessHost
from tests.support.never_twice import SIGCONT, SIGKILL, SIGSTOP, ClockStep, Ledger, etcd_of, processes_of, signal_all, wait_for

#: How long every store may take to be ready again before a round.
STORE_S = 90.0


class StoresNotReady(AssertionError):
    """A computer's store was not ready again, even after its host was started again."""


@dataclass
class Round:
    number: int
    fault: str
    computer: str
    to_serving_s: float | None
    served_on: str | None
    #: Hosts started again before this round because their store was not ready within STORE_S.
    healed: list[str] = field(default_factory=list)


def local_ready(host: HeadlessHost, node_id: str) -> dict | None:
    """The host's own copy of the node when it is ready (None when it has none or does not answer)."""
    try:
        status, doc = host.api("GET", "/api/nodes")
    except (OSError, ValueError):
        return None
    if status != 200:
        return None
    return next((n for n in doc.get("nodes", []) if n.get("id") == node_id and n.get("ready")), None)


def holder(hosts: Sequence[HeadlessHost], node_id: str) -> HeadlessHost | None:
    return next((h for h in hosts if h.proc and h.proc.poll() is None and local_ready(h, node_id)), None)


def store_ready(host: HeadlessHost) -> bool:
    try:
        return (ok(host, "GET", "/api/fleet")["store"] or {}).get("state") == "ready"
    except (AssertionError, OSError, ValueError):
        return False


def stores_ready(hosts: Sequence[HeadlessHost], number: int, say=print) -> list[str]:
    """Every store ready (bounded); a host whose store is not is started again, once: their names."""
    if wait_for(lambda: all(store_ready(h) for h in hosts), timeout=STORE_S, interval=0.5):
        return []
    stuck = [h for h in hosts if not store_ready(h)]
    names = [h.home.name for h in stuck]
    say(f"round {number}: the store of {', '.join(names)} is not ready again within {STORE_S:g} s; its host is "
        "started again")
    for host in stuck:
        host.stop()
        host.start()
    if not wait_for(lambda: all(store_ready(h) for h in hosts), timeout=STORE_S, interval=0.5):
        raise StoresNotReady(f"round {number}: the store of {', '.join(names)} is not ready again, even after a restart")
    return names


def run_rounds(hosts: Sequence[HeadlessHost], node_id: str, faults: Sequence[str], lease_ms: int,
               ledger: Ledger, say=print, done: list[Round] | None = None, settle_s: float = 0.0) -> list[Round]:
    """The rounds, into `done` (given: what was done is there when a round raises). `settle_s`: how
    long the fleet runs on, calm, before each fault (a computer sleeps in a settled fleet, seldom
    seconds after a failover: the replicas pushed, the leader's place looked at)."""
    lease_s = lease_ms / 1000
    done = [] if done is None else done
    for number, fault in enumerate(faults, 1):
        healed = stores_ready(hosts, number, say)
        target = wait_for(lambda: holder(hosts, node_id), timeout=lease_s + 60)
        assert isinstance(target, HeadlessHost), f"round {number}: the node serves nowhere"
        if settle_s > 0:
            calm_until = time.monotonic() + settle_s
            wait_for(lambda: time.monotonic() >= calm_until, timeout=settle_s + 5)  # the prober asks meanwhile
            target = wait_for(lambda: holder(hosts, node_id), timeout=lease_s + 60)
            assert isinstance(target, HeadlessHost), f"round {number}: the node serves nowhere"
        assert target.proc is not None
        others = [h for h in hosts if h is not target]
        started = time.monotonic()
        served: object = None
        if fault == "freeze":
            procs = processes_of(target.proc.pid, target.home)
            signal_all(procs, SIGSTOP)
            try:
                served = wait_for(lambda: holder(others, node_id), timeout=lease_s + 30)
            finally:
                signal_all(procs, SIGCONT)
        elif fault == "cut_store":
            # Its etcd member alone frozen: the host's client moves to another member and keeps its lease,
            # so the node serves on where it is (or, if the lease lapses, elsewhere): either is fine, once
            # two lease times have passed with the member still frozen.
            procs = etcd_of(target.proc.pid)
            signal_all(procs, SIGSTOP)
            until = time.monotonic() + 2 * lease_s + 2
            try:
                served = wait_for(lambda: holder(others, node_id)
                                  or (time.monotonic() > until and holder([target], node_id)), timeout=lease_s + 30)
            finally:
                signal_all(procs, SIGCONT)
        elif fault == "partition":
            if target.net is None:
                raise ValueError("a partition needs the hosts on a home network (tests/support/netns.py)")
            target.net.cut(target.net_index)
            try:
                served = wait_for(lambda: holder(others, node_id), timeout=lease_s + 30)
            finally:
                target.net.mend(target.net_index)
        elif fault == "kill_host":
            target.proc.kill()
            target.proc.wait(timeout=10)
            served = wait_for(lambda: holder(others, node_id), timeout=lease_s + 30)
            target.start()
        elif fault == "kill_etcd":
            signal_all(etcd_of(target.proc.pid), SIGKILL)
            served = wait_for(lambda: holder(hosts, node_id), timeout=lease_s + 30)
        elif fault == "clock_step":
            with ClockStep():
                served = wait_for(lambda: holder(hosts, node_id), timeout=lease_s + 30)
                time.sleep(0)  # the round's check is the prober's: nothing else to wait on
        else:
            raise ValueError(fault)
        took = 0.0 if served is target else time.monotonic() - started  # served on where it was
        on = served.home.name if isinstance(served, HeadlessHost) else None
        done.append(Round(number, fault, target.home.name, round(took, 2) if on else None, on, healed))
        say(f"round {number} (t={started:.1f}): {fault} of {target.home.name} -> serving on {on} after {took:.1f} s; "
            f"generations seen {ledger.generations()}, violations {len(ledger.violations())}")
    return done
