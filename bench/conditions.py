"""What the run conditions cost with 100 nodes: a supervision pass, the judge, a condition change.

    .venv/bin/python bench/conditions.py [-n 100] [--rounds 10]

In process, over the fake driver (no child processes: what is measured is the engine's own
work, the records' writes to disk, fsynced, included): (a) a pass over N running nodes with no
host holds at all, (b) the same pass with the host's holds asked of every node (Pause all off,
the conditions saying run), (c) the judge's verdict with a schedule of three windows, (d) a
condition change that holds every node (N stops and N record writes, one pass), and (e) its
end, which releases and starts them all. Prints min / p50 / p90 / max in milliseconds and
writes bench/results/conditions.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import summary, table, write_result  # noqa: E402

from cadre_desktop.host.conditions.judge import Judge  # noqa: E402
from cadre_desktop.host.core.supervision.host_holds import ConditionsVerdict, HostHolds  # noqa: E402
from cadre_desktop.settings import Settings  # noqa: E402
from tests.support.fake_conditions import FakeSource  # noqa: E402
from tests.support.rig import Rig  # noqa: E402

SCHEDULE = [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00"},
            {"days": ["sat", "sun"], "from": "00:00", "to": "24:00"},
            {"days": ["wed"], "from": "12:00", "to": "13:00"}]


class Say:
    def __init__(self) -> None:
        self.now: ConditionsVerdict | None = None

    def verdict(self) -> ConditionsVerdict | None:
        return self.now


async def timed(work) -> float:
    t0 = time.perf_counter()
    await work()
    return (time.perf_counter() - t0) * 1000


async def run(n: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(Path(tmp))
        for i in range(n):
            rig.node(f"n{i:03d}", live=True)
        found: dict[str, list[float]] = {k: [] for k in ("pass, no host holds", "pass, host holds asked",
                                                         "judge verdict (schedule)", "condition change: hold all",
                                                         "its end: release all")}
        for _ in range(rounds):
            found["pass, no host holds"].append(await timed(rig.sup.reconcile))
        holds = HostHolds(Path(tmp) / "host-pause.json", rig.clock)
        say = Say()
        holds.conditions = say
        rig.sup.observer.host_hold = holds.wanted
        for _ in range(rounds):
            found["pass, host holds asked"].append(await timed(rig.sup.reconcile))
        judge = Judge(Settings(run_schedule=SCHEDULE), rig.clock, [FakeSource("on_battery", False)])

        async def verdict() -> None:
            judge.now_says()
        for _ in range(rounds * 10):
            found["judge verdict (schedule)"].append(await timed(verdict))
        for _ in range(rounds):
            say.now = ConditionsVerdict("on battery")
            holds.conditions_changed()
            found["condition change: hold all"].append(await timed(rig.sup.reconcile))
            say.now = None
            holds.conditions_changed()
            found["its end: release all"].append(await timed(rig.sup.reconcile))
        await rig.close()
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="nodes")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    found = asyncio.run(run(args.n, args.rounds))
    rows = [[what, *(summary(v)[k] for k in ("n", "min", "p50", "p90", "max"))] for what, v in found.items()]
    print(f"{args.n} nodes, milliseconds")
    print(table(["what", "n", "min", "p50", "p90", "max"], rows))
    path = write_result("conditions", {"nodes": args.n, "ms": {what: summary(v) for what, v in found.items()}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
