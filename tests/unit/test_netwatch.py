"""Address changes and wakes, with an injected address source and a fake clock."""

from __future__ import annotations

import asyncio

from cadre_desktop.host.core.ops.netwatch import AddressWatcher
from cadre_desktop.host.core.records.records import NodeStatus
from tests.support.clock import FakeClock, settle
from tests.support.polling import async_wait_until
from tests.support.rig import Answers


class Source:
    def __init__(self, value="192.168.1.10"):
        self.value = value

    def __call__(self):
        return self.value


def make(clock, source, changes, wakes=None):
    async def on_change(old, new):
        changes.append((old, new))
    return AddressWatcher(source=source, clock=clock, on_change=on_change,
                          on_wake=(wakes.append if wakes is not None else None),
                          interval_s=15, debounce_s=3, wake_gap_s=20)


async def test_a_change_that_holds_is_acted_on_once():
    clock, src = FakeClock(), Source()
    changes: list[tuple[str, str]] = []
    w = make(clock, src, changes)
    src.value = "10.0.0.7"
    task = asyncio.create_task(w.check())
    await settle()  # let it start its debounce wait
    await clock.run_for(3)
    assert await task is True
    assert changes == [("192.168.1.10", "10.0.0.7")]
    assert await w.check() is False
    assert changes == [("192.168.1.10", "10.0.0.7")]


async def test_a_flap_within_the_debounce_does_nothing():
    clock, src = FakeClock(), Source()
    changes: list[tuple[str, str]] = []
    w = make(clock, src, changes)
    src.value = "10.0.0.7"
    task = asyncio.create_task(w.check())
    await settle()
    await clock.run_for(1)
    src.value = "192.168.1.10"
    await clock.run_for(2)
    assert await task is False
    assert changes == []


async def test_no_busy_polling_the_loop_waits_its_interval():
    clock, src = FakeClock(), Source()
    changes: list[tuple[str, str]] = []
    reads = []

    def read():
        reads.append(1)
        return src.value
    w = make(clock, read, changes)
    reads.clear()
    w.start()
    await settle()
    await clock.run_for(14)
    assert reads == []
    await clock.run_for(1)
    await async_wait_until(lambda: reads, what="one read")
    assert len(reads) == 1
    await w.stop()


async def test_wake_is_a_gap_between_wall_and_monotonic_clocks():
    clock, src = FakeClock(), Source()
    changes: list[tuple[str, str]] = []
    wakes: list[float] = []
    w = make(clock, src, changes, wakes)
    w.start()
    await settle()
    clock.jump_wall(3600)  # slept an hour: the monotonic clock did not move
    w.check_soon()
    await async_wait_until(lambda: wakes, what="wake noticed")
    assert 3500 < wakes[0] <= 3600
    await settle()
    await clock.run_for(15)
    assert len(wakes) == 1  # an ordinary interval is not a wake
    await w.stop()


# -- the host's reaction, on a fake orchestrator -------------------------------------------

async def restart_stale(rig, new_address):
    """What the host does with its nodes on a new address, on the rig's parts."""
    from cadre_desktop.host.core.ops.netwatch import restart_stale
    from cadre_desktop.host.core.records.records import SUPERVISED

    await restart_stale(rig.store.list(), SUPERVISED, rig.orch, rig.service.restart, new_address, "node")


async def test_change_restarts_only_stale_running_supervised_nodes_without_budget(rig):
    for node_id in ("stale", "fresh", "down", "broken"):
        rig.node(node_id, status=NodeStatus.ERROR if node_id == "broken" else NodeStatus.JOINED,
                 live=node_id != "down", attempts=2, ago_s=5)
    for h in rig.orch.handles.values():
        h.advertise_host = "10.0.0.7" if h.node_id == "fresh" else "192.168.1.10"
    before = {r.id: r.handle for r in rig.store.list()}
    await restart_stale(rig, "10.0.0.7")
    assert rig.orch.stopped == [before["stale"]]
    assert [s[0] for s in rig.orch.spawned] == ["stale"]
    assert rig.store.get("stale").attempts == 2  # budget untouched
    assert rig.store.get("broken").status is NodeStatus.ERROR
    assert rig.store.get("down").handle == before["down"]


async def test_after_a_wake_every_node_is_probed_at_once(rig):
    from cadre_desktop.host.core.supervision.probe import Probe

    rig.node("a", live=True)
    rig.node("b", live=True)
    answers = Answers()
    for h in rig.orch.handles.values():
        answers.by_port[h.api_port] = {"state": "joined", "peer_id": "p", "cadre": "c"}
    probe = Probe(lifecycle=rig.lifecycle, driver=rig.orch, clock=rig.clock,
                  interval_s=60, fetch=answers, grace_s=180)
    probe.start()
    await async_wait_until(lambda: len(answers.calls) == 2, what="first round")
    await settle()
    watcher = AddressWatcher(source=lambda: "x", clock=rig.clock,
                             on_change=None,  # type: ignore[arg-type]  # the address never changes here
                             on_wake=lambda slept: probe.probe_soon(), interval_s=15)
    watcher.start()
    await settle()
    rig.clock.jump_wall(8 * 3600)
    watcher.check_soon()
    await async_wait_until(lambda: len(answers.calls) == 4, what="re-probe after wake")
    assert rig.clock.monotonic() == 1000.0  # no time passed: it did not wait out the interval
    await watcher.stop()
    await probe.stop()
