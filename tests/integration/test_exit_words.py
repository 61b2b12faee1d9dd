"""An exit is told once the node's last lines are in its log.

The words of an exit ("exited with code 3: <its last line>") and a give-up's
"Last log lines" are read from the log when the exit is told; the log pump
writes them. These children leave their last line to a process outside their
group that writes it a moment after the leader died, so the pump's end comes
visibly later than the leader's: an exit told at the leader's death would
read the earlier line.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from cadre_desktop.host.local.handles import ExitEvent
from cadre_desktop.host.local.orchestrator import Orchestrator
from cadre_desktop.host.local.ports import PortAllocator
from cadre_desktop.paths import Paths
from tests.support.polling import async_wait_until
from tests.support.real_orchestrator import port_range

#: The leader writes a first line and exits 3; a child in a session of its own (no group
#: kill reaches it) keeps the output open and writes the last line 0.4 s later.
LATE_LAST_LINE = (
    "import os, sys, time\n"
    "print('an early line', file=sys.stderr, flush=True)\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    open('late.pid', 'w').write(str(os.getpid()))\n"
    "    time.sleep(0.4)\n"
    "    print('the last words', file=sys.stderr, flush=True)\n"
    "    os._exit(0)\n"
    "sys.exit(3)\n"
)


def orchestrator(home: Path, script: str) -> Orchestrator:
    return Orchestrator(
        paths=Paths(home, home, home / "logs"),
        node_command=[sys.executable, "-c", script],
        ports=PortAllocator(*port_range(home), bind_host="127.0.0.1"),
        bind_host="127.0.0.1",
        advertise_host=lambda: "127.0.0.1",
        stop_timeout_s=2.0,
    )


async def told_exit(orch: Orchestrator, node_id: str) -> tuple[ExitEvent, list[str]]:
    """The first exit told, and the node's last log line read when it was."""
    told: asyncio.Future[tuple[ExitEvent, list[str]]] = asyncio.get_running_loop().create_future()

    def on_exit(event: ExitEvent) -> None:
        if not told.done():
            told.set_result((event, orch.log_tail(node_id, 1)))
    orch.subscribe(on_exit)
    await orch.spawn(node_id, {})
    return await asyncio.wait_for(told, 10)


def end_late_writer(orch: Orchestrator, node_id: str) -> None:
    try:
        os.kill(int((orch.paths.node_dir(node_id) / "late.pid").read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass  # it ended already, or never wrote its pid


async def test_an_exit_is_told_after_the_pump_wrote_the_nodes_last_line(tmp_path):
    orch = orchestrator(tmp_path, LATE_LAST_LINE)
    await orch.init()
    try:
        event, last = await told_exit(orch, "n1")
        assert event.returncode == 3 and not event.requested
        assert last == ["the last words"]
    finally:
        end_late_writer(orch, "n1")
        orch.close()


async def test_a_pump_that_outlives_its_node_delays_the_exit_only_so_long(tmp_path, monkeypatch):
    from cadre_desktop.host.local import orchestrator as module

    # The output stays open far longer than the bound: the exit is told at the bound.
    monkeypatch.setattr(module, "PUMP_FLUSH_S", 0.05)
    orch = orchestrator(tmp_path, LATE_LAST_LINE.replace("0.4", "5"))
    await orch.init()
    try:
        event, last = await told_exit(orch, "n1")
        assert event.returncode == 3
        assert last == ["an early line"]
    finally:
        end_late_writer(orch, "n1")
        orch.close()


async def test_a_child_whose_exit_is_not_told_yet_still_runs_for_the_supervisor(tmp_path):
    """Its log may miss its last line until its exit is told: a pass that judged it then (another
    node's exit, the sweep) read its exit's words from the log too early, a give-up's among them."""
    from cadre_desktop.host.core.driver import DriverStatus

    orch = orchestrator(tmp_path, LATE_LAST_LINE)
    await orch.init()
    told: list[ExitEvent] = []
    orch.subscribe(told.append)
    try:
        handle = await orch.spawn("n1", {})
        await async_wait_until(lambda: not handle.alive, timeout=10, interval=0.005, what="the leader's exit")
        assert not told and orch.status(handle.id) is DriverStatus.RUNNING
        await async_wait_until(lambda: told, timeout=10, what="the exit told")
        assert orch.status(handle.id) is DriverStatus.FAILED and orch.log_tail("n1", 1) == ["the last words"]
    finally:
        end_late_writer(orch, "n1")
        orch.close()
