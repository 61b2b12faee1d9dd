"""Never twice, benchmarked (issue 36, part 4): >= 50 rounds of faults on three real hosts, every copy polled.

    .venv/bin/python bench/never_twice.py [--rounds 50] [--seed N] [--lease-ms 15000] [--faults freeze,kill_host,...]

Three headless hosts pair into a fleet (a 3-member etcd on 127.0.0.1), a claimed node on bravo
gets failover on, and `--rounds` faults drawn by the printed seed (tests/support/never_twice.py:
freeze, kill -9 of a host, kill -9 of an etcd member, the store cut, a clock step; the clock
step needs root and moves this machine's wall clock for a moment, put back after) are applied
to the computer holding the node while a prober asks every copy's /status. Writes
bench/results/never-twice.json: the violations (must be 0), each round's fault and seconds from
the fault to serving again, freeze -> serving p50/p90 against the goal (lease + 2 s), and the
machine's load before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import write_result  # noqa: E402

from tests.support import netns  # noqa: E402
from tests.support.never_twice import FAULTS, Ledger, Prober, plan  # noqa: E402
from tests.support.never_twice_fleet import copies, fleet_with_failover_node  # noqa: E402
from tests.support.never_twice_rounds import run_rounds  # noqa: E402


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--lease-ms", type=int, default=15000)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--name", default="never-twice")
    parser.add_argument("--settle-s", type=float, default=0.0,
                        help="how long the fleet runs on, calm, before each fault (default: none)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="the hosts' homes under this folder (kept: their logs), not a temporary one")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    why_no_network = netns.available()
    kinds = [f for f in args.faults.split(",") if f in FAULTS and not (f == "partition" and why_no_network)]
    faults = plan(seed, args.rounds, kinds, must=kinds)
    print(f"never twice: seed {seed}, {args.rounds} rounds, lease {args.lease_ms} ms")
    load_before = psutil.getloadavg()
    error = None
    rounds: list = []
    ledger = Ledger()
    keep = contextlib.nullcontext(str(args.keep)) if args.keep is not None else tempfile.TemporaryDirectory()
    net = None if why_no_network else netns.HomeNetwork(3)
    with contextlib.ExitStack() as stack:
        if net is not None:
            stack.callback(net.close)
        tmp = stack.enter_context(keep)
        hosts, node_id = stack.enter_context(fleet_with_failover_node(Path(tmp), args.lease_ms, net))
        prober = Prober(lambda: copies(hosts, node_id), ledger, node_id=node_id,
                        max_s=args.rounds * (args.lease_ms / 1000 + 120),
                        enter=(lambda: net.enter(None)) if net is not None else None).start()
        try:
            run_rounds(hosts, node_id, faults, args.lease_ms, ledger, done=rounds, settle_s=args.settle_s)
        except AssertionError as exc:
            error = str(exc)
            print(f"stopped: {error}")
        finally:
            prober.stop()
    violations = ledger.violations()
    freezes = [r.to_serving_s for r in rounds if r.fault == "freeze" and r.to_serving_s is not None]
    result = {
        "seed": seed, "lease_ms": args.lease_ms, "settle_s": args.settle_s, "rounds_planned": args.rounds,
        "rounds_done": len(rounds),
        "stopped_by": error, "answers": len(ledger.answers), "asked": prober.asked,
        "generations": ledger.generations(), "violations": len(violations),
        "violations_first": [str(v) for v in violations[:10]],
        "freeze_to_serving_s": {"p50": quantile(freezes, 0.5), "p90": quantile(freezes, 0.9),
                                "mean": round(statistics.fmean(freezes), 2) if freezes else None,
                                "goal_s": args.lease_ms / 1000 + 2},
        "hosts_started_again_for_their_store": sum(len(r.healed) for r in rounds),
        "rounds": [r.__dict__ for r in rounds],
        "load_before": load_before, "load_after": psutil.getloadavg(),
    }
    print(f"violations {len(violations)}; freeze -> serving p50 {result['freeze_to_serving_s']['p50']} s, "
          f"p90 {result['freeze_to_serving_s']['p90']} s (goal {args.lease_ms / 1000 + 2} s)")
    print(f"wrote {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
