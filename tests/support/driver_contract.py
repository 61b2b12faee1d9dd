"""The driver contract's rigs: each driver with the few test-only abilities the suite needs.

tests/integration/test_driver_contract.py is one suite of behaviours every driver
(`host/core/driver.NodeDriver`) must have; it runs over a `DriverRig` per driver.
A rig builds drivers on one home the way a host does (`new_driver`, as many as the
test needs: a closed one's instances are the next one's to re-attach), hears every
exit each of them tells, and does what only a test does: crash an instance, wait
until a node answers, read what an instance really runs, and see whether it still
exists outside the driver's own books.

- `LocalRig`: the local driver built by `host/drivers.make_driver` from settings, on a
  temporary home, running the real reference node (`python -m cadre_desktop.node`).
  A crash is SIGKILL; what runs is read from the OS (psutil).
- `FakeRig`: `tests/support/fake_driver.FakeOrchestrator` on one `FakeMachine`; a crash
  is its `exit()`.
- `SystemdRig`: the systemd driver on the tests' own user manager (`user_manager.py`),
  the real reference node in its units; a crash is `KillUnit` SIGKILL, what runs is what
  the manager lists. Where no systemd is installed it skips, saying so.

Every wait is a poll against a deadline (tests/support/polling.py).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import psutil

from cadre_desktop.host.core.driver import DriverConfig, DriverStatus, Exit, InstanceInfo, NodeDriver
from cadre_desktop.host.drivers import driver_config, make_driver, make_systemd_driver
from cadre_desktop.host.local import launch
from cadre_desktop.host.systemd import units
from cadre_desktop.host.systemd.driver import SystemdDriver
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings, parse_settings
from tests.support import port_blocks
from tests.support.fake_driver import FakeMachine, FakeOrchestrator
from tests.support.node_scan import kill_node_processes, node_processes
from tests.support.polling import async_wait_until, wait_until
from tests.support.user_manager import UserManager, session_manager

#: A marker in the interpreter's options: the reference node refuses arguments of its own,
#: and `-X` options are the interpreter's, seen in the process's command line.
MARKED_COMMAND = (sys.executable, "-X", "cadre_contract_mark", "-m", "cadre_desktop.node")
WAIT_S = 15.0


def claim_env() -> dict[str, str]:
    """What the host gives a node it starts: one claim secret (the node contract's)."""
    return {"CADRE_CLAIM_SECRET": secrets.token_urlsafe(24)}


class DriverRig:
    """One driver kind under the contract; the subclasses say how to build and hurt it."""

    name = ""

    def __init__(self) -> None:
        self.drivers: list[NodeDriver] = []
        #: Its port range, and the one a `reconfigure` moves it to: 100 ports no other test
        #: holds, of this suite or one running beside it (tests/support/port_blocks.py).
        low = port_blocks.take(100, 15000, 20000)
        self.port_range, self.other_port_range = (low, low + 49), (low + 50, low + 69)
        #: Every exit any driver this rig built has told, in order.
        self.exits: list[Exit] = []

    @property
    def driver(self) -> NodeDriver:
        """The driver built last."""
        return self.drivers[-1]

    # -- what each driver kind says ----------------------------------------------------
    def build(self) -> NodeDriver:
        raise NotImplementedError

    def config(self, node_command: tuple[str, ...], port_range: tuple[int, int]) -> DriverConfig:
        raise NotImplementedError

    async def crash(self, info: InstanceInfo) -> int | None:
        """End the instance as a crash would; returns the exit code its Exit must carry."""
        raise NotImplementedError

    def crash_unwatched(self, info: InstanceInfo) -> None:
        """End the instance while no driver watches (its host is gone), and wait until it has."""
        raise NotImplementedError

    async def wait_answering(self, info: InstanceInfo) -> None:
        """Until the instance answers on its ports (the node contract's readiness)."""

    def command_of(self, info: InstanceInfo) -> tuple[str, ...]:
        """What the instance runs, read from outside the driver's books where there is an outside."""
        raise NotImplementedError

    def running(self, node_id: str) -> int:
        """How many instances of the node exist, as the world (not the driver) sees it."""
        raise NotImplementedError

    async def node_output(self, info: InstanceInfo) -> str:
        """Have the node print its start-up line (the real node does by itself); returns a piece of it."""
        raise NotImplementedError

    def hold_starts(self) -> Callable[[], None]:
        """Keep every start in flight (its instance coming up, the start not ended) until the call returned."""
        raise NotImplementedError

    async def wait_in_flight(self, node_id: str) -> None:
        """Until a held start of the node is in flight (its instance, where the driver makes it first, exists)."""
        raise NotImplementedError

    def cleanup(self) -> None:
        for driver in self.drivers:
            driver.close()

    # -- shared ------------------------------------------------------------------------
    def new_driver(self) -> NodeDriver:
        """A driver on the rig's home, as a (re)started host builds it; `init` is the test's to call."""
        driver = self.build()
        driver.subscribe(self.exits.append)
        self.drivers.append(driver)
        return driver

    async def start(self, node_id: str, attempt: int, **options: Any) -> InstanceInfo:
        return await self.driver.start(node_id, attempt, claim_env(), **options)

    async def start_held(self, node_id: str) -> tuple[NodeDriver, Callable[[], None], asyncio.Task[InstanceInfo]]:
        """A new driver (its `init` done) with the node's first start in flight and held there: the
        driver, what releases the start, and the start's task."""
        driver = self.new_driver()
        await driver.init()
        release = self.hold_starts()
        start = asyncio.create_task(self.start(node_id, 1))
        await self.wait_in_flight(node_id)
        return driver, release, start

    async def started(self, node_id: str, attempt: int = 1, **options: Any) -> InstanceInfo:
        info = await self.start(node_id, attempt, **options)
        await self.wait_answering(info)
        return info

    def exits_of(self, info: InstanceInfo) -> list[Exit]:
        return [e for e in self.exits if e.handle_id == info.id]

    async def wait_exit(self, info: InstanceInfo) -> Exit:
        found = await async_wait_until(lambda: self.exits_of(info), timeout=WAIT_S, what=f"the exit of {info.id}")
        return found[0]

    async def wait_status(self, info: InstanceInfo, status: DriverStatus) -> None:
        await async_wait_until(lambda: self.driver.status(info.id) is status, timeout=WAIT_S,
                               what=f"{info.id} {status.value} (is {self.driver.status(info.id).value})")

    async def wait_running(self, node_id: str, count: int) -> None:
        await async_wait_until(lambda: self.running(node_id) == count, timeout=WAIT_S,
                               what=f"{count} instance(s) of {node_id} (there are {self.running(node_id)})")


class LocalRig(DriverRig):
    name = "local"

    def __init__(self, home: Path) -> None:
        super().__init__()
        self.home = home
        self.paths = Paths(home, home, home / "logs")
        self.settings = parse_settings({
            "port_range": list(self.port_range), "bind_host": "127.0.0.1", "advertise_host": "127.0.0.1",
            "stop_timeout_ms": 2000, "warm_standby": False,
        }, "the contract's settings")

    def build(self) -> NodeDriver:
        return make_driver(self.settings, self.paths, lambda: "127.0.0.1")

    def config(self, node_command: tuple[str, ...], port_range: tuple[int, int]) -> DriverConfig:
        changed: Settings = self.settings.with_changes(node_command=list(node_command), port_range=port_range)
        return driver_config(changed)

    async def crash(self, info: InstanceInfo) -> int | None:
        os.kill(info.pid, signal.SIGKILL)
        return -signal.SIGKILL

    def crash_unwatched(self, info: InstanceInfo) -> None:
        proc = psutil.Process(info.pid)
        proc.kill()
        proc.wait(timeout=WAIT_S)  # reaped here: a host that went away leaves no zombie to its child

    async def wait_answering(self, info: InstanceInfo) -> None:
        def answers() -> bool:  # a connection to this machine is accepted or refused at once
            for port in (info.api_port, info.p2p_port):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    return False
            return True
        await async_wait_until(answers, timeout=WAIT_S, interval=0.02, what=f"{info.node_id} answering")

    def command_of(self, info: InstanceInfo) -> tuple[str, ...]:
        return tuple(psutil.Process(info.pid).cmdline())

    def running(self, node_id: str) -> int:
        return len(node_processes(self.home).get(node_id, []))

    async def node_output(self, info: InstanceInfo) -> str:
        return "listening on"

    def hold_starts(self) -> Callable[[], None]:
        """Each child is started, then its start's thread waits (bounded) before handing it back."""
        release, real = threading.Event(), launch.launch
        self._in_flight: set[str] = set()

        def held(*args: Any, **kwargs: Any) -> launch.Launched:
            launched = real(*args, **kwargs)
            self._in_flight.add(kwargs["node_id"])
            release.wait(WAIT_S)
            return launched

        launch.launch = held

        def undo() -> None:
            launch.launch = real
            release.set()
        self._undo_hold = undo
        return undo

    async def wait_in_flight(self, node_id: str) -> None:
        await async_wait_until(lambda: node_id in self._in_flight, timeout=WAIT_S, what=f"a start of {node_id} in flight")

    def cleanup(self) -> None:
        if undo := getattr(self, "_undo_hold", None):
            undo()
        super().cleanup()
        kill_node_processes(self.home)


class FakeRig(DriverRig):
    name = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.machine = FakeMachine()

    def build(self) -> NodeDriver:
        return FakeOrchestrator(self.machine)

    @property
    def fake(self) -> FakeOrchestrator:
        driver = self.driver
        assert isinstance(driver, FakeOrchestrator)
        return driver

    def config(self, node_command: tuple[str, ...], port_range: tuple[int, int]) -> DriverConfig:
        return DriverConfig(node_command=node_command, port_range=port_range, stop_timeout_s=2.0)

    async def crash(self, info: InstanceInfo) -> int | None:
        self.fake.exit(info.id, code=70)
        return 70

    def crash_unwatched(self, info: InstanceInfo) -> None:
        instance = self.machine.instances[info.id]
        instance.alive, instance.returncode = False, 70

    def command_of(self, info: InstanceInfo) -> tuple[str, ...]:
        return self.machine.instances[info.id].command

    def running(self, node_id: str) -> int:
        return sum(1 for h in self.machine.instances.values() if h.node_id == node_id and h.alive)

    async def node_output(self, info: InstanceInfo) -> str:
        self.fake.say(info.node_id, f"fake node {info.node_id}: listening on {info.api_port}")
        return "listening on"

    def hold_starts(self) -> Callable[[], None]:
        held = self.fake.hold_starts = asyncio.Event()
        return held.set

    async def wait_in_flight(self, node_id: str) -> None:
        await async_wait_until(lambda: node_id in self.fake.in_flight, timeout=WAIT_S,
                               what=f"a start of {node_id} in flight")


class SystemdRig(LocalRig):
    """The systemd driver built by `host/drivers.make_systemd_driver` on the tests' own user manager
    (tests/support/user_manager.py), running the real reference node as units. A crash is
    `KillUnit` SIGKILL of the unit's main process; what runs is what the manager lists."""

    name = "systemd"

    def __init__(self, home: Path, manager: UserManager) -> None:
        super().__init__(home)
        self.manager = manager
        self.home_id = "h" + secrets.token_hex(8)

    def build(self) -> NodeDriver:
        return make_systemd_driver(self.settings, self.paths, lambda: "127.0.0.1", home_id=self.home_id,
                                   address=self.manager.address)

    def unit_of(self, info: InstanceInfo) -> str:
        return units.unit_name(self.home_id, info.node_id, info.attempt)

    async def crash(self, info: InstanceInfo) -> int | None:
        done = await asyncio.to_thread(self.manager.systemctl, "kill", "--kill-whom=main", "--signal=SIGKILL",
                                       self.unit_of(info))
        assert done.returncode == 0, done.stderr
        return -signal.SIGKILL

    def crash_unwatched(self, info: InstanceInfo) -> None:
        done = self.manager.systemctl("kill", "--kill-whom=main", "--signal=SIGKILL", self.unit_of(info))
        assert done.returncode == 0, done.stderr
        wait_until(lambda: self.running(info.node_id) == 0, timeout=WAIT_S, what=f"{self.unit_of(info)} gone")

    def running(self, node_id: str) -> int:
        out = self.manager.systemctl("list-units", "--state=active,activating,deactivating", "--plain",
                                     "--no-legend", f"{units.family(self.home_id)}{node_id}-*").stdout
        return sum(1 for line in out.splitlines() if line.strip())

    def hold_starts(self) -> Callable[[], None]:
        """Each unit is started, then its start waits (bounded) before it goes on."""
        bus = cast(SystemdDriver, self.driver).bus
        release, real = asyncio.Event(), bus.call
        self._in_flight = set()

        async def held(member: str, signature: str, body: list[object], fds: Sequence[int] = ()) -> list[Any]:
            reply = await real(member, signature, body, fds)
            if member == "StartTransientUnit":
                parsed = units.parse_name(self.home_id, str(body[0]))
                self._in_flight.add(parsed[0] if parsed else "")
                async with asyncio.timeout(WAIT_S):
                    await release.wait()
            return reply

        bus.call = held  # type: ignore[method-assign]

        def undo() -> None:
            bus.call = real  # type: ignore[method-assign]
            release.set()
        self._undo_hold = undo
        return undo

    def cleanup(self) -> None:
        if undo := getattr(self, "_undo_hold", None):
            undo()
        for driver in self.drivers:
            driver.close()
        self.manager.systemctl("kill", "--signal=SIGKILL", f"{units.family(self.home_id)}*")
        wait_until(lambda: not self.manager.units(f"{units.family(self.home_id)}*"), timeout=WAIT_S,
                   what="the test's units gone")


def systemd_rig(home: Path) -> DriverRig:
    return SystemdRig(home, session_manager())


RIGS: dict[str, Callable[[Path], DriverRig]] = {
    "local": LocalRig,
    "fake": lambda _home: FakeRig(),
    "systemd": systemd_rig,
}
