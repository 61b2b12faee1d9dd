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


@pytest.mark.skipif(os.environ.get("CADRE_NEVER_TWICE") != "1", reason=(
    "open (issue 36): this checker finds a copy with no generation answering after a take and a second "
    "failover not always taken; run with CADRE_NEVER_TWICE=1 (and bench/never_twice.py) until both are fixed"))
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
