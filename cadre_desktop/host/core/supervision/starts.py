"""The one start of a supervised node (`Starter`): re-read, start through the driver, record it, or let it go.

Every start goes through here (a pass, Retry, Restart, Resume, a wake, the first start of a new
record); the supervisor's serial queue runs them, so two starts of one node never overlap. The
driver's start is awaited: the child comes up on a thread while the loop goes on
(`host/local/spawner.py`), so the record may change meanwhile. Not on the queue, a Remove (and a
loan's end) lands whenever it lands, and a hold or a give-up written by someone else would too. So
the record is read again after the await, and written in the same turn: the STARTED (or ADOPT)
transition is applied only to the record the start began from (still supervised, still naming the
same previous child). Otherwise the start is *let go*: the new child is stopped, nothing is written
and no attempt is counted, since it was the host, not the node, that cancelled it; no record ever
names a child it did not mean, and no child is left that no record names.

A start that raises is judged by `decide()` (`START_FAILED`: counted, unless the machine is to
blame) and its failure written in the record's mark before the error goes on to the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets as _random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cadre_desktop.errors import CadreError, OutOfDescriptors, SecretsError, message_of
from cadre_desktop.host.core.clock import Clock, stamp
from cadre_desktop.host.core.driver import DriverStatus, InstanceInfo, NodeDriver
from cadre_desktop.host.core.records.lifecycle import AnyLife, Change, Supervised
from cadre_desktop.host.core.records.records import RespawnInfo, StartMark, next_mark
from cadre_desktop.host.core.supervision.decide import Observation, StartFailure, decide
from cadre_desktop.host.core.supervision.exits import ExitBook
from cadre_desktop.host.core.supervision.gate import StartGate
from cadre_desktop.host.core.supervision.kinds import Kinds
from cadre_desktop.host.core.supervision.passes import PassSchedule
from cadre_desktop.host.core.timeline import Timeline
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate

log = logging.getLogger(__name__)


def new_host_token() -> str:
    return _random.token_urlsafe(32)


@dataclass(frozen=True)
class StartPlan:
    """What one start of a node needs, gathered before the driver is asked (`Starter._prepare`)."""

    record: Supervised
    attempt: int
    #: The node contract's environment for this start: its secret, its name, the host token.
    env: dict[str, str]
    token: str
    want_ports: tuple[int, int] | None
    avoid_ports: set[int]
    #: A pass's, Retry's or wake's start (not a record's first): its mark, the words it follows,
    #: when it began and whether it spends an attempt.
    mark: StartMark | None = None
    words: str | None = None
    now: str = ""
    counted: bool = False


class Starter:
    """Starts a node's child and records it; keeps each child's host token (memory only)."""

    def __init__(self, *, driver: NodeDriver, gate: KeyringGate, clock: Clock, kinds: Kinds, exits: ExitBook,
                 timeline: Timeline, start_gate: StartGate, passes: PassSchedule,
                 supervisor_id: str) -> None:
        self.driver, self.gate, self.clock = driver, gate, clock
        #: Each kind's numbers (a failed start is judged by `decide()` with them).
        self.kinds = kinds
        #: What the start reads and marks: the last exit's words and the node's requests, its times, the gate's slots.
        self.exits, self.timeline, self.start_gate = exits, timeline, start_gate
        #: Its `stopped`: a start the host's stop cancelled leaves its record as it was.
        self.passes = passes
        #: Who starts (host:pid), in every start mark.
        self.supervisor_id = supervisor_id
        #: Per child this process started, the host token it was given (memory only).
        self.host_tokens: dict[str, str] = {}
        #: More of a start's environment, per node: a failover node's lease (host/fleetrun/failover.py).
        self.extra_env: Callable[[str], dict[str, str]] = _no_env

    def host_token(self, handle_id: str) -> str | None:
        return self.host_tokens.get(handle_id)

    async def start(self, lc: AnyLife, node_id: str, *, counted: bool, expect_handle: str | None,
                    soon: bool = False) -> bool:
        """The one start of a node; True when a child was started and recorded.

        A live child of the node that the record does not name yet is taken over instead
        (spends nothing): a host that died after starting it, or a write that failed, never
        gets a second child beside it. A record removed or changed while the child came up
        gets nothing, and the child is stopped (uncounted). `soon`: a start of the pass,
        which answers nobody: its record's write is not waited for (`Lifecycle.apply`),
        only its event is told after the write's sync.
        """
        plan = self._prepare(lc, node_id, counted=counted, expect_handle=expect_handle, soon=soon)
        if plan is None:
            return False
        try:
            child = await self._launch(plan)
        except Exception as exc:
            if not self.passes.stopped:  # a host stopping cancelled it: the record stays as it was
                self._failed(lc, plan, exc)
            raise
        return await self._record(lc, plan, child, soon=soon)

    def _prepare(self, lc: AnyLife, node_id: str, *, counted: bool, expect_handle: str | None,
                 soon: bool) -> StartPlan | None:
        """What a start needs, gathered in one place with no await: the record read again (None
        when it went, changed, or a live child of it was taken over instead), its secret (raises
        while the keyring has not given it), its start mark (the last exit's words taken into
        it), its environment and ports; the node's requests of an earlier run are dropped."""
        record = lc.get(node_id)
        if record is None or record.status not in lc.kind.supervised or record.handle != expect_handle:
            return None
        if self._adopted(lc, record, soon=soon):
            return None
        secret = self.gate.cached(node_id, lc.kind.secret_kind(record))
        if secret is None:
            raise SecretsError(f"the secret of node {node_id} has not been read from the keyring yet")
        attempt, now = record.next_start, stamp(self.clock)
        words = self.exits.take_for_start(node_id, record.handle)
        want = (record.api_port, record.p2p_port) if record.api_port and record.p2p_port else None
        mark = next_mark(record.start, attempt, now, self.supervisor_id, counted=counted, words=words)
        return self._plan(lc, record, secret, attempt, want_ports=want, mark=mark, words=words, now=now,
                          counted=counted)

    def _adopted(self, lc: AnyLife, record: Supervised, *, soon: bool) -> bool:
        """A live child of the node that its record does not name: the record takes it (True)."""
        live = [h for h in self.driver.handles_for(record.id) if h.alive and h.id != record.handle]
        if not live:
            return False
        child = live[-1]
        lc.apply(record.id, Change.ADOPT, lambda r: r.replace(
            handle=child.id, api_port=child.api_port, p2p_port=child.p2p_port), soon=soon)
        log.info("node %s: its record takes the running child pid %s", record.id, child.pid)
        return True

    async def _record(self, lc: AnyLife, plan: StartPlan, child: InstanceInfo, *, soon: bool) -> bool:
        """The started child into the record the start began from (read again), or let go."""
        record, node_id, now = plan.record, plan.record.id, plan.now
        change = Change.ADOPT if child.adopted else Change.STARTED
        fresh = lc.get(node_id)
        written, respawn = None, None
        if fresh is not None and fresh.handle == record.handle:
            respawn = RespawnInfo(record.attempts + 1, now) if plan.counted else record.respawn
            written = lc.apply(node_id, change, lambda r: r.replace(
                handle=child.id, api_port=child.api_port, p2p_port=child.p2p_port, respawn=respawn, start=plan.mark,
                problem=None), soon=soon)
        if written is None:
            await self._let_go(node_id, child)
            return False
        self.timeline.started(child.id)
        # An adopted child is past its boot, a forked one has almost none (see `gate`); a new one holds a slot.
        if change is Change.STARTED and not child.forked:
            self.start_gate.started(child.id)
        self.timeline.mark(("start", node_id), now)
        if plan.counted:
            self.timeline.mark(("attempt", node_id), now)
        # The budget's attempt, as every view numbers it (`attempts`); the start's own number is not.
        log.info("node %s started (%s), pid %s", node_id,
                 f"attempt {respawn.attempts}" if plan.counted and respawn else "not counted as an attempt", child.pid)
        return True

    async def launch(self, lc: AnyLife, record: Supervised, secret: str, attempt: int, *,
                     want_ports: tuple[int, int] | None = None) -> InstanceInfo:
        """A child of a record being created (its first start, `provision.py`), as `start` starts one."""
        return await self._launch(self._plan(lc, record, secret, attempt, want_ports=want_ports))

    def _plan(self, lc: AnyLife, record: Supervised, secret: str, attempt: int, *,
              want_ports: tuple[int, int] | None, mark: StartMark | None = None, words: str | None = None,
              now: str = "", counted: bool = False) -> StartPlan:
        """The record's secret and a fresh host token in its environment, clear of the ports the
        other records remember. No request of an earlier run holds this start."""
        token = new_host_token()
        self.exits.before_start(record.id)
        env = {**lc.kind.secret_env(record, secret, token), **self.extra_env(record.id)}
        return StartPlan(record=record, attempt=attempt, env=env, token=token,
                         want_ports=want_ports, avoid_ports=lc.remembered_ports(record.id), mark=mark, words=words,
                         now=now, counted=counted)

    async def _launch(self, plan: StartPlan) -> InstanceInfo:
        """Every child is started here; its host token is kept (in memory only) for the child that got it."""
        child = await self.driver.start(plan.record.id, plan.attempt, plan.env, want_ports=plan.want_ports,
                                        avoid_ports=plan.avoid_ports)
        if not child.adopted and "CADRE_HOST_TOKEN" in plan.env:
            self.host_tokens[child.id] = plan.token
        return child

    def spawned(self, lc: AnyLife, node_id: str, child: InstanceInfo, **fields: Any) -> Any:
        """A record being created gets its first child (`launch`, attempt 1) and first start
        mark: the record written, or None when it went meanwhile."""
        mark = StartMark(attempt=child.attempt or 1, at=stamp(self.clock), by=self.supervisor_id)
        self.start_gate.started(child.id)
        return lc.apply(node_id, Change.SPAWNED, lambda r: r.replace(
            handle=child.id, api_port=child.api_port, p2p_port=child.p2p_port, start=mark, **fields))

    def _failed(self, lc: AnyLife, plan: StartPlan, exc: Exception) -> None:
        """A start that raised: `decide()` says whether it counts; its failure goes into the record's mark."""
        record, now = plan.record, plan.now
        mark = plan.mark or StartMark(attempt=plan.attempt, at=now, by=self.supervisor_id)
        error = exc.message if isinstance(exc, CadreError) else f"the node could not be started: {exc}"
        failure = StartFailure(error=error, message=message_of(exc), machine=isinstance(exc, OutOfDescriptors))
        verdict = decide(record, Observation(status=DriverStatus.FAILED, start_failure=failure), self.kinds.policy(lc),
                         lc.kind.supervised, lc.kind.held)
        counted = plan.counted and verdict.counted
        if not verdict.counted:
            mark = next_mark(record.start, plan.attempt, now, self.supervisor_id, counted=False, words=plan.words)
        respawn = RespawnInfo(record.attempts + 1, now) if counted else record.respawn
        failed_mark = dataclasses.replace(mark, last_exit=f"could not be started: {error}")
        if lc.apply(record.id, Change.START_FAILED, lambda r: r.replace(
                error=error, respawn=respawn, start=failed_mark)) is not None and counted:
            self.timeline.mark(("attempt", record.id), now)

    async def _let_go(self, node_id: str, child: InstanceInfo) -> None:
        """A start whose record went or changed while its child came up: the child is stopped, uncounted."""
        self.host_tokens.pop(child.id, None)
        log.info("node %s was removed or changed while it started; its new child (pid %s) is stopped", node_id,
                 child.pid)
        try:
            await self.driver.stop(child.id)
        except Exception as exc:  # the record names no such child; the next start's drop ends it anyway
            log.error("could not stop the child of node %s that is no longer wanted: %s", node_id, exc)


def _no_env(_node_id: str) -> dict[str, str]:
    return {}
