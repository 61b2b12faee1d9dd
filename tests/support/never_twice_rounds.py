"""Rounds of faults on a fleet of real headless hosts, the checker of never twice polling throughout.

`fleet_with_failover_node` starts three hosts, pairs them, claims a node on the second and turns
failover on; `run_rounds` applies one fault per round (tests/support/never_twice.py) to the
computer holding the node, waits (bounded) until the node serves again and every store is ready,
and returns what each round saw (fault, computer, seconds from the fault to serving again).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tests.support.fleet_hosts import ok
from tests.support.headless import HeadlessHost
from tests.support.never_twice import SIGCONT, SIGKILL, SIGSTOP, ClockStep, Ledger, etcd_of, processes_of, signal_all, wait_for


@dataclass
class Round:
    number: int
    fault: str
    computer: str
    to_serving_s: float | None
    served_on: str | None


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


def run_rounds(hosts: Sequence[HeadlessHost], node_id: str, faults: Sequence[str], lease_ms: int,
               ledger: Ledger, say=print) -> list[Round]:
    lease_s = lease_ms / 1000
    done: list[Round] = []
    for number, fault in enumerate(faults, 1):
        if not wait_for(lambda: all(store_ready(h) for h in hosts), timeout=90, interval=0.5):
            raise AssertionError(f"round {number}: the stores are not ready again")
        target = wait_for(lambda: holder(hosts, node_id), timeout=lease_s + 60)
        assert isinstance(target, HeadlessHost), f"round {number}: the node serves nowhere"
        assert target.proc is not None
        others = [h for h in hosts if h is not target]
        started = time.monotonic()
        served: object = None
        if fault in ("freeze", "cut_store"):
            procs = (processes_of(target.proc.pid, target.home) if fault == "freeze" else etcd_of(target.proc.pid))
            signal_all(procs, SIGSTOP)
            try:
                served = wait_for(lambda: holder(others, node_id), timeout=lease_s + 30)
            finally:
                signal_all(procs, SIGCONT)
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
        took = time.monotonic() - started
        on = served.home.name if isinstance(served, HeadlessHost) else None
        done.append(Round(number, fault, target.home.name, round(took, 2) if on else None, on))
        say(f"round {number} (t={started:.1f}): {fault} of {target.home.name} -> serving on {on} after {took:.1f} s; "
            f"generations seen {ledger.generations()}, violations {len(ledger.violations())}")
    return done
