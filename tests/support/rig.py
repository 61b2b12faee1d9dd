"""The supervision rig for unit tests: the real lifecycle, gate, supervisor, service and
probe over a fake clock, a fake driver and an in-memory keyring."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.events import EventBus
from cadre_desktop.host.core.ops.service import NodeService
from cadre_desktop.host.core.records.lifecycle import Lifecycle
from cadre_desktop.host.core.records.records import NodeMode, NodeRecord, NodeStatus, RespawnInfo, StartMark
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.host.core.supervision.passes import PassSchedule
from cadre_desktop.host.core.supervision.probe import Probe
from cadre_desktop.host.core.supervision.runfile import RunFiles
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SERVICE, SecretKind, SecretStore
from cadre_desktop.host.wiring import supervise
from cadre_desktop.settings import Settings
from tests.support.clock import FakeClock
from tests.support.fake_driver import FakeOrchestrator
from tests.support.keyrings import MemoryKeyring


class Answers:
    """A fake GET /status: what each port answers (None: no answer)."""

    def __init__(self):
        self.by_port: dict[int, dict | None] = {}
        self.calls: list[int] = []

    async def __call__(self, port, since=None, wait_s=0.0):
        """A node that ignores a long-poll's query (`since`, `wait_s`) and answers at once."""
        self.calls.append(port)
        return self.by_port.get(port)


class WaitingAnswers(Answers):
    """A fake GET /status that honours `?wait=&since=` on the fake clock, as the reference node does:
    answered once the port's state is no longer `since` (`say`), or after `wait_s`."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.waits: list[int] = []
        self._moved = asyncio.Event()

    def say(self, port, status):
        self.by_port[port] = status
        self._moved.set()
        self._moved = asyncio.Event()

    async def __call__(self, port, since=None, wait_s=0.0):
        if since is None or wait_s <= 0:
            return await super().__call__(port)
        self.waits.append(port)
        moved = self._moved
        if (self.by_port.get(port) or {}).get("state") == since:
            waits = {asyncio.ensure_future(self.clock.sleep(wait_s)), asyncio.ensure_future(moved.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waits:
                    task.cancel()
        self.calls.append(port)
        return self.by_port.get(port)


class Rig:
    def __init__(self, tmp_path, keyring=None, keyring_timeout_s: float = 5.0, start_limit: int = 1000,
                 **settings):
        self.clock = FakeClock()
        self.keyring = keyring or MemoryKeyring()
        self.secrets = SecretStore(self.keyring, timeout_s=keyring_timeout_s)
        self.store = RecordStore(tmp_path / "hosted-nodes.json")
        self.orch = FakeOrchestrator()
        self.events = EventBus()
        self.seen: list = []
        self.events.subscribe(self.seen.append)
        self.lifecycle = Lifecycle(store=self.store, events=self.events, clock=self.clock)
        self.gate = KeyringGate(self.secrets, sleep=self.clock.sleep, monotonic=self.clock.monotonic)
        self.settings = Settings(**settings)
        self.answers = Answers()
        self.probe = Probe(lifecycle=self.lifecycle, driver=self.orch, clock=self.clock, interval_s=5,
                           fetch=self.answers, grace_s=15)
        #: Each node's work folder (where its run.json is).
        self.work = tmp_path / "nodes"
        self.passes = PassSchedule(self.clock)
        self.sup = supervise(lifecycle=self.lifecycle, driver=self.orch, gate=self.gate, settings=self.settings,
                             clock=self.clock, passes=self.passes, probe=self.probe,
                             run_files=RunFiles(lambda node_id: self.work / node_id),
                             # Unpaced unless a test asks (the machine's limit would make tests depend on its cores).
                             start_limit=start_limit)
        self.service = NodeService(lifecycle=self.lifecycle, driver=self.orch, gate=self.gate, supervisor=self.sup,
                                   kinds=self.sup.kinds, starter=self.sup.starter, clock=self.clock)

    def node(self, node_id="n1", status=NodeStatus.JOINED, live=False, attempts=None, ago_s=0.0,
             last_attempt_at=None, handle="auto", mode=NodeMode.CLAIM, cached=True, mark=None,
             answered=True) -> NodeRecord:
        """A record with a child (live or dead), its secret in the keyring and, if `cached`, in memory."""
        if handle == "auto":
            h = self.orch.add_live(node_id)
            if not live:
                h.alive = False
                h.returncode = 1
            handle = h.id
        respawn = None
        if attempts is not None:
            when = last_attempt_at if last_attempt_at is not None else iso(self.clock.now() - timedelta(seconds=ago_s))
            respawn = RespawnInfo(attempts, when)
        if mark is None and handle:
            mark = StartMark(attempt=self.orch.get(handle).attempt if self.orch.get(handle) else 0,
                             at=iso(self.clock.now()), answered=answered)
        rec = NodeRecord(id=node_id, name=node_id, status=status, mode=mode, handle=handle,
                         respawn=respawn, start=mark, created_at=node_id)
        self.store.put(rec)
        kind = SecretKind.CLAIM if mode is NodeMode.CLAIM else SecretKind.INVITATION
        self.keyring.items[(SERVICE, f"{node_id}/{kind.value}")] = f"secret-of-{node_id}"
        if cached:
            self.gate._cache[(node_id, kind)] = f"secret-of-{node_id}"
        return rec

    async def probed(self) -> None:
        """One probe round, then the pass it would bring (the host kicks one on the probe's news)."""
        await self.probe.probe_all()
        await self.sup.reconcile()

    def rec(self, node_id="n1") -> NodeRecord | None:
        return self.store.get(node_id)

    def present_rec(self, node_id="n1") -> NodeRecord:
        """The record, which the test expects to be there."""
        rec = self.store.get(node_id)
        assert rec is not None, f"no record {node_id}"
        return rec

    def kinds(self):
        return [e.kind for e in self.seen]

    async def close(self):
        await self.sup.stop()
        await self.gate.close()
        if hasattr(self.keyring, "release"):
            self.keyring.release.set()
        self.secrets.close()
        await asyncio.sleep(0)
