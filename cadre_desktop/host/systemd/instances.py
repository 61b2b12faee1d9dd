"""One unit's row in the driver's books: the engine's `InstanceInfo`, and what the signals said.

A row is made before its unit is asked for, so not one of the unit's changes is missed;
it knows the unit by its object path, and one start of it by its `InvocationID` (new at
every start, so a later unit of the same name is never taken for it). Its `id` is the
node id and the invocation's first hex digits: a host that comes back to the same unit
names it the same.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from cadre_desktop.host.systemd import units

#: The states of a unit that has a process (or is about to, or is ending it).
LIVE_STATES = frozenset({"active", "activating", "deactivating", "reloading"})


@dataclass
class Unit:
    id: str
    node_id: str
    unit: str
    path: str
    attempt: int
    api_port: int
    p2p_port: int
    started_at: str
    advertise_host: str = ""
    pid: int = 0
    adopted: bool = False
    alive: bool = True
    returncode: int | None = None
    stop_requested: bool = False
    #: A newer start replaced it: its end is no news.
    replaced: bool = False
    invocation: str = ""
    control_group: str = ""
    #: Its memory cap, when it has one (the words of its kill say it).
    memory_mb: int | None = None
    #: The service's last properties the signals told (`ExecMainCode`, `ExecMainStatus`, `Result`).
    service: dict[str, Any] = field(default_factory=dict)
    #: Seen in a live state: an `inactive` before that is the unit being loaded, not its end.
    seen_live: bool = False
    #: The memory cap killed it (cgroup v1: the kernel's notification, `oomwatch`).
    oom_killed: bool = False
    came_up: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    ended: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def forked(self) -> bool:
        """Never: a unit starts cold (no standby, no fork server)."""
        return False

    @property
    def ports(self) -> tuple[int, int]:
        return self.api_port, self.p2p_port

    def exit_code(self) -> int | None:
        code, status = self.service.get("ExecMainCode"), self.service.get("ExecMainStatus")
        if isinstance(code, int) and isinstance(status, int):
            return units.returncode(code, status)
        return None

    def exit_cause(self) -> str | None:
        """"stopped by its memory cap of N MB" when that cap killed it, else None."""
        if self.memory_mb and (self.oom_killed or self.service.get("Result") == "oom-kill"):
            return f"stopped by its memory cap of {self.memory_mb} MB"
        return None

    def could_not_exec(self) -> bool:
        return self.service.get("ExecMainCode") == 1 and self.service.get("ExecMainStatus") == units.EXIT_EXEC


def handle_id(node_id: str, invocation: str) -> str:
    return f"{node_id}.{invocation[:12]}"


def invocation_hex(value: object) -> str:
    return value.hex() if isinstance(value, bytes | bytearray) else ""
