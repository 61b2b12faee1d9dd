"""Never twice (issue 36, part 4): five rounds of faults on three real hosts and their 3-member etcd,
every copy of a failover node polled throughout; once a copy of generation g+1 has answered, no
copy of generation <= g answers again.

The suite's mix is freeze, kill -9 of a host and kill -9 of an etcd member (each at least once,
the rest drawn from them by a printed seed); the store cut and the clock step (the machine's wall
clock: shared with everything else on it) run in the benchmark only (bench/never_twice.py).
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.never_twice import FAULTS, Ledger, Prober, listed_ports, plan
from tests.support.never_twice_fleet import fleet_with_failover_node
from tests.support.never_twice_rounds import run_rounds

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(os.name != "posix", reason="SIGSTOP, SIGKILL")]

LEASE_MS = 3000
SUITE_FAULTS = FAULTS[:3]


@pytest.mark.xfail(strict=False, reason=(
    "found by this checker on the failover branch (bf3d719..a43a311), for its owner to fix: a second failover "
    "(the node frozen again on the computer that took it) is not taken by anyone within lease + 30 s (the "
    "taker chosen, smallest alive id, may be the old holder, which keeps no replica), and once a copy of "
    "generation None (started before failover went on) answered after generation 2 had"))
def test_five_rounds_of_faults_and_no_copy_answers_after_a_newer_generation(tmp_path):
    seed = int(os.environ.get("CADRE_NEVER_TWICE_SEED") or random.randrange(2**32))
    faults = plan(seed, 5, SUITE_FAULTS, must=SUITE_FAULTS)
    print(f"never twice: seed {seed}, faults {faults}")
    with fleet_with_failover_node(tmp_path, LEASE_MS) as (hosts, node_id):
        ledger = Ledger()
        prober = Prober(lambda: set().union(*(listed_ports(h.home, node_id) for h in hosts)), ledger, node_id=node_id,
                        max_s=280).start()
        try:
            rounds = run_rounds(hosts, node_id, faults, LEASE_MS, ledger)
        finally:
            prober.stop()
        violations = ledger.violations()
        assert not violations, f"seed {seed}: " + "; ".join(map(str, violations[:5]))
        assert len(ledger.answers) > 20 and len(ledger.generations()) >= 2, (ledger.generations(), prober.asked)
        assert all(r.served_on for r in rounds), rounds
