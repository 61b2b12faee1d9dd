"""The composition of supervision: every collaborator of the supervisor made here, each given
what it needs as a typed constructor parameter, and the supervisor given them all.

`Host._make_supervision` (host.py) calls `supervise`, and so does the unit tests' rig: one
wiring, so a test runs the very graph the host runs. Nothing here acts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from enum import Enum

from cadre_desktop.host.core.clock import Clock
from cadre_desktop.host.core.driver import NodeDriver
from cadre_desktop.host.core.records.lifecycle import AnyLife, RecordKind, Supervised
from cadre_desktop.host.core.records.records import Hold
from cadre_desktop.host.core.supervision.exits import ExitBook
from cadre_desktop.host.core.supervision.gate import StartGate, machine_limit
from cadre_desktop.host.core.supervision.holds import Holds
from cadre_desktop.host.core.supervision.kinds import Kinds
from cadre_desktop.host.core.supervision.observe import DecisionBook, Observer
from cadre_desktop.host.core.supervision.passes import PassSchedule
from cadre_desktop.host.core.supervision.probe import Probe
from cadre_desktop.host.core.supervision.runfile import RunFiles
from cadre_desktop.host.core.supervision.starts import Starter
from cadre_desktop.host.core.supervision.supervisor import Supervisor
from cadre_desktop.host.core.timeline import Timeline
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.settings import Settings

#: The hold the host wants a node to have now (host_holds.HostHolds.wanted).
HostHold = Callable[[Supervised, RecordKind], "tuple[Enum, Hold] | None"]


def supervise(*, lifecycle: AnyLife, driver: NodeDriver, gate: KeyringGate, settings: Settings, clock: Clock,
              passes: PassSchedule, probe: Probe | None = None, run_files: RunFiles | None = None,
              on_sweep: Callable[[], Awaitable[object]] | None = None, host_hold: HostHold | None = None,
              start_limit: int | None = None) -> Supervisor:
    """The supervisor of `lifecycle`'s records (and any kind `watch`ed later), over `driver`.

    `passes` is made first by the caller, since the probe's news asks it for a pass."""
    kinds = Kinds(lifecycle, settings)
    timeline = Timeline(clock)
    holds = Holds(clock=clock, timeline=timeline)
    exits = ExitBook(driver.log_tail, gate.redact, run_files=run_files, clock=clock)
    start_gate = StartGate(
        limit=start_limit if start_limit is not None else machine_limit(), monotonic=clock.monotonic,
        is_ready=lambda h: bool(probe and probe.is_ready(h)), is_running=driver.is_running, kick=passes.after_exit)
    if probe is not None:
        probe.on_answer(start_gate.answered)
    observer = Observer(driver=driver, gate=gate, exits=exits, timeline=timeline, holds=holds, start_gate=start_gate,
                        probe=probe, host_hold=host_hold)
    starter = Starter(driver=driver, gate=gate, clock=clock, kinds=kinds, exits=exits,
                      timeline=timeline, start_gate=start_gate, passes=passes,
                      supervisor_id=f"{socket.gethostname()}:{os.getpid()}")
    supervisor = Supervisor(kinds=kinds, driver=driver, gate=gate, clock=clock, passes=passes, observer=observer,
                            starter=starter, holds=holds, exits=exits, decisions=DecisionBook(clock),
                            start_gate=start_gate, on_sweep=on_sweep)

    def keyring_back() -> None:
        supervisor.kick("keyring")

    gate.on_ready(keyring_back)
    return supervisor
