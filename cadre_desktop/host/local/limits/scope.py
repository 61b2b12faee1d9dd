"""Linux desktops: a node's caps as a transient systemd user scope, over D-Bus.

What a desktop gives an unprivileged user is its systemd user manager, which
may make cgroups for it: `StartTransientUnit` on `org.freedesktop.systemd1`
(the session bus) with the child's pid, `MemoryMax` and `CPUQuotaPerSecUSec`
makes a scope `cadre-desktop-<home id>-<node id>-<pid>.scope` holding the node
and all it starts. The scope is collected by systemd once its processes are
gone (`CollectMode=inactive-or-failed`, even after a kill by its memory cap),
and Remove and Quit stop it, so none is left behind.

D-Bus is asynchronous and a start never awaits: the scope is asked for right
after the spawn, on the loop, and the node runs uncapped for the few
milliseconds the call takes. Every call goes through `ScopeOps` (faked in unit
tests) and is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TypeAlias

from cadre_desktop.host.core.driver import NodeCaps
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

#: How long one call to the user manager may take.
CALL_TIMEOUT_S = 5.0
SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"

#: A scope's property: (name, D-Bus signature, value), the value a string, a number or pids.
ScopeProperty: TypeAlias = tuple[str, str, str | int | list[int]]


def user_manager_address(env: dict[str, str] | None = None, uid: int | None = None) -> str | None:
    """The session bus of a systemd user manager, or None: no bus, or no user manager on it."""
    env = dict(os.environ) if env is None else env
    uid = os.getuid() if uid is None else uid
    runtime = Path(env.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}")
    if not (runtime / "systemd").is_dir():
        return None
    address = env.get("DBUS_SESSION_BUS_ADDRESS")
    if address:
        return address
    bus = runtime / "bus"
    return f"unix:path={bus}" if bus.exists() else None


def scope_properties(node_id: str, pid: int, caps: NodeCaps) -> list[ScopeProperty]:
    """The scope's properties as (name, D-Bus signature, value)."""
    props: list[ScopeProperty] = [
        ("Description", "s", f"cadre-desktop node {node_id}"),
        ("PIDs", "au", [pid]),
        ("CollectMode", "s", "inactive-or-failed"),
    ]
    if caps.memory_mb:
        props.append(("MemoryMax", "t", caps.memory_mb << 20))
        props.append(("MemorySwapMax", "t", 0))
    if caps.cpu_percent:
        # CPU time per second of wall time, in microseconds: 20 % of one core is 200 ms.
        props.append(("CPUQuotaPerSecUSec", "t", caps.cpu_percent * 10_000))
    return props


class ScopeOps:
    """The calls on the systemd user manager (dbus-fast; real ones only where a manager runs)."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def _call(self, member: str, signature: str, body: list[object]) -> None:
        from dbus_fast import Message, MessageType
        from dbus_fast.aio import MessageBus

        async with asyncio.timeout(CALL_TIMEOUT_S):
            bus = await MessageBus(bus_address=self.address).connect()
            try:
                reply = await bus.call(Message(destination=SYSTEMD, path=MANAGER_PATH, interface=MANAGER,
                                               member=member, signature=signature, body=body))
            finally:
                bus.disconnect()
        if reply is None or reply.message_type == MessageType.ERROR:
            name = reply.error_name if reply is not None else "no reply"
            raise OSError(f"systemd {member}: {name}: {reply.body[0] if reply and reply.body else ''}")

    async def start(self, unit: str, props: list[ScopeProperty]) -> None:
        from dbus_fast import Variant

        body: list[object] = [unit, "fail", [[name, Variant(sig, value)] for name, sig, value in props], []]
        await self._call("StartTransientUnit", "ssa(sv)a(sa(sv))", body)

    async def stop(self, unit: str) -> None:
        await self._call("StopUnit", "ss", [unit, "fail"])


class Scopes:
    """The scopes of one home's nodes: asked for after each spawn, stopped at Remove and Quit."""

    def __init__(self, ops: ScopeOps, family: str) -> None:
        self.ops = ops
        self.family = family
        #: node id -> the unit of its last start.
        self.units: dict[str, str] = {}
        #: node id -> why systemd did not make its last start's scope (its caps are not held).
        self.refused: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def place(self, node_id: str, pid: int, caps: NodeCaps) -> None:
        unit = f"{self.family}-{node_id}-{pid}.scope"
        self.units[node_id] = unit
        self.refused.pop(node_id, None)
        task = asyncio.get_running_loop().create_task(self._start(unit, node_id, pid, caps))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(self, unit: str, node_id: str, pid: int, caps: NodeCaps) -> None:
        try:
            await self.ops.start(unit, scope_properties(node_id, pid, caps))
        except Exception as exc:  # a D-Bus library's own error too; the node still runs
            log.error("node %s: could not make its systemd scope, it runs without its caps: %s", node_id, exc)
            if self.units.get(node_id) == unit:  # said by its views (`CapsKeeper.enforcement`)
                self.refused[node_id] = one_line(f"systemd did not make its scope: {exc}", 300)

    async def remove(self, node_id: str) -> None:
        unit = self.units.pop(node_id, None)
        self.refused.pop(node_id, None)
        if unit is not None:
            await self._stop(unit)

    async def remove_all(self) -> None:
        units, self.units = list(self.units.values()), {}
        self.refused.clear()
        await asyncio.gather(*(self._stop(u) for u in units))

    async def _stop(self, unit: str) -> None:
        try:
            await self.ops.stop(unit)
        except Exception as exc:  # already collected (its processes ended): nothing is left
            log.debug("stopping %s: %s", unit, exc)
