"""Never twice (issue 36, part 4): five rounds of faults on three real hosts and their 3-member etcd,
every copy of a failover node polled throughout; once a copy of generation g+1 has answered, no
copy of generation <= g answers again.

The suite's mix is freeze, kill -9 of a host and kill -9 of an etcd member (each at least once,
the rest drawn from them by a printed seed; `CADRE_NEVER_TWICE_SEED` repeats one); the store cut
and the clock step (the machine's wall clock: shared with everything else on it) run in the
benchmark only (bench/never_twice.py). Seeds that found the bugs this guards (issue 36): 229001799
(a kill -9'd host's restart started its node with no lease terms before the fleet was wired; the
second failover not taken: the old holder had dropped the only replicas), 2812833229 (the same
copy with no terms, generation None answering after generation 2).
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.never_twice import FAULTS, Ledger, Prober, listed_ports, plan
from tests.support.never_twice_fleet import fleet_with_failover_node
from tests.support.never_twice_rounds import StoresNotReady, run_rounds

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(os.name != "posix", reason="SIGSTOP, SIGKILL")]

LEASE_MS = 3000
SUITE_FAULTS = FAULTS[:3]


def test_five_rounds_of_faults_and_no_copy_answers_after_a_newer_generation(tmp_path):
    seed = int(os.environ.get("CADRE_NEVER_TWICE_SEED") or random.randrange(2**32))
    faults = plan(seed, 5, SUITE_FAULTS, must=SUITE_FAULTS)
    print(f"never twice: seed {seed}, faults {faults}")
    rounds: list = []
    stuck: StoresNotReady | None = None
    ledger, prober = Ledger(), None
    try:
        with fleet_with_failover_node(tmp_path, LEASE_MS) as (hosts, node_id):
            prober = Prober(lambda: set().union(*(listed_ports(h.home, node_id) for h in hosts)), ledger,
                            node_id=node_id, max_s=280).start()
            try:
                run_rounds(hosts, node_id, faults, LEASE_MS, ledger, done=rounds)
            finally:
                prober.stop()
    except StoresNotReady as exc:
        stuck = exc
    # Whatever stopped the rounds, every answer received is checked.
    violations = ledger.violations()
    assert not violations, f"seed {seed}: " + "; ".join(map(str, violations[:5]))
    if stuck is not None:
        # The etcd member or its client did not come back (not this checker's finding: issue 36's store).
        pytest.xfail(f"seed {seed}: {stuck} after {len(rounds)} round(s), 0 violations")
    assert len(ledger.answers) > 20 and len(ledger.generations()) >= 2, (ledger.generations(), prober and prober.asked)
    assert all(r.served_on for r in rounds), rounds
