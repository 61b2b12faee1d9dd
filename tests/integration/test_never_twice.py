"""Never twice (issue 36, part 4): five rounds of faults on three real hosts and their 3-member etcd,
every copy of a failover node polled throughout; once a copy of generation g+1 has answered, no
copy of generation <= g answers again.

The hosts are three computers of a home network of namespaces the test makes (tests/support/netns.py;
on 127.0.0.1 where the machine refuses namespaces). The suite's mix is freeze, kill -9 of a host,
kill -9 of an etcd member and a partition of one computer by its namespace (each at least once,
the rest drawn from them by a printed seed; `CADRE_NEVER_TWICE_SEED` repeats one); the store cut
and the clock step (the machine's wall clock: shared with everything else on it) run in the
benchmark only (bench/never_twice.py). A store that does not come back fails the test as
loudly as a violation: the etcd member and its client are part of never twice too. Seeds that found the bugs this guards (issue 36): 229001799
(a kill -9'd host's restart started its node with no lease terms before the fleet was wired; the
second failover not taken: the old holder had dropped the only replicas), 2812833229 (the same
copy with no terms, generation None answering after generation 2).
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support import netns
from tests.support.never_twice import Ledger, Prober, plan
from tests.support.never_twice_fleet import copies, fleet_with_failover_node
from tests.support.never_twice_rounds import StoresNotReady, run_rounds

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(os.name != "posix", reason="SIGSTOP, SIGKILL")]

LEASE_MS = 3000
WHY_NO_NETWORK = netns.available()
SUITE_FAULTS = ("freeze", "kill_host", "kill_etcd") + (() if WHY_NO_NETWORK else ("partition",))


@pytest.fixture
def home_network():
    if WHY_NO_NETWORK:
        yield None
        return
    net = netns.HomeNetwork(3)
    try:
        yield net
    finally:
        net.close()


def test_five_rounds_of_faults_and_no_copy_answers_after_a_newer_generation(tmp_path, home_network):
    net = home_network
    seed = int(os.environ.get("CADRE_NEVER_TWICE_SEED") or random.randrange(2**32))
    faults = plan(seed, 5, SUITE_FAULTS, must=SUITE_FAULTS)
    print(f"never twice: seed {seed}, faults {faults}" + (f" (no partition: {WHY_NO_NETWORK})" if net is None else ""))
    rounds: list = []
    stuck: StoresNotReady | None = None
    ledger, prober = Ledger(), None
    try:
        with fleet_with_failover_node(tmp_path, LEASE_MS, net) as (hosts, node_id):
            prober = Prober(lambda: copies(hosts, node_id), ledger, node_id=node_id, max_s=280,
                            enter=(lambda: net.enter(None)) if net is not None else None).start()
            try:
                run_rounds(hosts, node_id, faults, LEASE_MS, ledger, done=rounds)
            finally:
                prober.stop()
    except StoresNotReady as exc:
        stuck = exc
    # Whatever stopped the rounds, every answer received is checked first.
    violations = ledger.violations()
    assert not violations, f"seed {seed}: " + "; ".join(map(str, violations[:5]))
    assert stuck is None, f"seed {seed}: {stuck} after {len(rounds)} round(s)"
    assert not [r for r in rounds if r.healed], f"seed {seed}: a store came back only once its host was restarted: {rounds}"
    assert len(ledger.answers) > 20 and len(ledger.generations()) >= 2, (ledger.generations(), prober and prober.asked)
    assert all(r.served_on for r in rounds), rounds
