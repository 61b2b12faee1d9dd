"""The supervisor: an `unclaimed`, `joining` or `joined` node is expected to run.

One reconcile pass behind three triggers: once at start (after the
orchestrator re-attached, catching every node that died while the host was
down), on every child exit (a crash is noticed in milliseconds; a storm of exits
coalesces into one queued pass), and a periodic sweep as the backstop for exits
nothing reported. Every pass runs on the service's serial queue.

Records are reconciled to handles, never handles to records: a handle that no
record names is reported once at start and left running, since stopping it could
end a node that serves its cadre.

The transitions, named where they happen:
  running, attempts old enough        -> REFILL (budget back to zero)
  down, but a live child of the node  -> ADOPT (the record takes that child)
  down, budget spent                  -> GIVE_UP (record `error`, child stopped, folder kept)
  down, inside backoff                -> WAIT
  down, backoff elapsed               -> RESPAWN (counts one attempt)
  respawn threw with budget spent     -> GIVE_UP
  respawn abandoned                   -> nothing (not a failure)
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from enum import Enum

from cadre_desktop.errors import CadreError
from cadre_desktop.host.clock import Clock, iso, parse_iso
from cadre_desktop.host.events import EventKind
from cadre_desktop.host.records import SUPERVISED, NodeRecord, NodeStatus
from cadre_desktop.host.service import NodeService, RespawnOutcome
from cadre_desktop.host.store import RecordStore
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)


class Transition(str, Enum):
    REFILL = "refill"
    ADOPT = "adopt"
    GIVE_UP = "give-up"
    WAIT = "wait"
    RESPAWN = "respawn"


async def _breathe() -> None:
    """Let everything already due run before the pass goes on.

    A respawn holds the loop for its spawn and two synced file writes (several
    ms, tens on a busy disk), so a storm of fifty would stall the control API,
    the probe and the UI for as long as all of them together. Yielding with
    `sleep(0)` is not enough: its continuation is queued ahead of the timers that
    fell due meanwhile, so they would still wait for the next respawn too. A
    zero-delay timer queues the pass behind them.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    handle = loop.call_later(0, lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        handle.cancel()


class Policy:
    """The numbers of supervision, from settings."""

    def __init__(self, settings: Settings) -> None:
        self.base_ms = settings.respawn_backoff_base_ms
        self.max_ms = settings.respawn_backoff_max_ms
        self.max_attempts = settings.respawn_max_attempts
        self.healthy_ms = settings.respawn_healthy_ms
        self.sweep_s = settings.sweep_ms / 1000

    def backoff(self, attempts: int) -> timedelta:
        """No attempt yet: at once. After n attempts: base * 2^n, capped."""
        if attempts <= 0:
            return timedelta(0)
        return timedelta(milliseconds=min(self.base_ms * (2 ** min(attempts, 40)), self.max_ms))


class Supervisor:
    def __init__(
        self,
        *,
        service: NodeService,
        store: RecordStore,
        orchestrator,
        settings: Settings,
        clock: Clock,
    ) -> None:
        self.service = service
        self.store = store
        self.orchestrator = orchestrator
        self.policy = Policy(settings)
        self.clock = clock
        self._timer: asyncio.Task | None = None
        self._unsubscribe = None
        #: An exit pass is queued or running; exits meanwhile only set `_exit_pass_wanted`.
        self._exit_pass_queued = False
        self._exit_pass_wanted = False
        self._disposed = False
        self._tasks: set[asyncio.Task] = set()
        #: The pass that ends the earliest backoff, and when it is due.
        self._backoff_task: asyncio.Task | None = None
        self._uncounted: set[str] = set()
        self._backoff_due: datetime | None = None

    # -- life -------------------------------------------------------------------

    def start(self, stopped_cleanly: frozenset[str] = frozenset()) -> None:
        """Subscribe to exits, start the sweep timer, report orphans, run the start-up pass.

        `stopped_cleanly` names nodes the last host stopped on a clean quit: the
        start-up pass starts them again without counting a failed attempt.
        """
        if self._timer is not None:
            return
        self._uncounted = set(stopped_cleanly)
        self._disposed = False
        # Subscribe first, so an exit during the start-up pass is not missed.
        self._unsubscribe = self.orchestrator.subscribe(self._on_exit)
        self._timer = asyncio.create_task(self._sweep_forever(), name="supervisor-sweep")
        self._report_orphans()
        self._spawn_pass("startup")

    async def stop(self) -> None:
        """End the timer and the subscription; an in-flight pass drops what it has not reached."""
        self._disposed = True
        if self._unsubscribe:
            self._unsubscribe()
            self._unsubscribe = None
        if self._timer:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _sweep_forever(self) -> None:
        while True:
            await self.clock.sleep(self.policy.sweep_s)
            try:
                await self.service.reap_stuck()
            except Exception as exc:
                log.error("reaping half-created nodes failed: %s", exc)
            try:
                self.orchestrator.trim_logs()
            except Exception as exc:
                log.debug("log trim failed: %s", exc)
            await self._pass_logged("timer")

    def _spawn_pass(self, trigger: str) -> asyncio.Task:
        task = asyncio.create_task(self._pass_logged(trigger), name=f"supervisor-{trigger}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pass_logged(self, trigger: str) -> list[str]:
        try:
            ids = await self.reconcile()
        except Exception:
            log.exception("supervisor pass (%s) failed", trigger)
            return []
        if ids:
            log.info("%s pass respawned %s", trigger, ", ".join(ids))
        return ids

    def _on_exit(self, event) -> None:
        """Cheap on purpose: no store read per exit, just ask for one pass.

        Exits before the queued pass begins ride on it. An exit while it runs
        asks for one more pass after it: the running pass may already have
        looked at that node (it yields between respawns), and without another
        pass its death would wait for the sweep.
        """
        if self._disposed:
            return
        self._exit_pass_wanted = True
        if self._exit_pass_queued:
            return
        self._exit_pass_queued = True

        async def run() -> None:
            try:
                while self._exit_pass_wanted and not self._disposed:
                    self._exit_pass_wanted = False
                    await self._pass_logged("exit")
            finally:
                self._exit_pass_queued = False

        task = asyncio.create_task(run(), name="supervisor-exit")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _report_orphans(self) -> None:
        try:
            known = {r.id for r in self.store.list()}
        except CadreError as exc:
            log.error("cannot check for orphaned children: %s", exc.message)
            return
        for handle in self.orchestrator.list_nodes():
            if handle.node_id not in known:
                log.warning(
                    "a child for node %s (pid %s) runs but no record names it; it is left running. "
                    "`cadre-desktop node remove %s` stops it and deletes its data.",
                    handle.node_id, handle.pid, handle.node_id,
                )

    # -- the pass -----------------------------------------------------------------

    async def reconcile(self) -> list[str]:
        """One pass over the records, queued behind any other pass, Retry or Restart."""
        return await self.service.serialize(self._reconcile_once)

    async def restart(self, node_id: str) -> None:
        """Restart a running node for a change it picks up only at start (its address).

        Leaves alone a record that is not supervised, has no handle, or whose
        node is down (that is the crash path's). Never spends the budget.
        """
        async def work() -> None:
            if self._disposed:
                return
            record = self.store.get(node_id)
            if record is None or record.status not in SUPERVISED or not record.handle:
                return
            if not self.orchestrator.is_running(record.handle):
                return
            await self.orchestrator.stop(record.handle)
            result = await self.service.respawn(node_id, count_attempt=False)
            log.info("node %s restarted: %s", node_id, result.outcome.value)
        await self.service.serialize(work)

    async def _reconcile_once(self) -> list[str]:
        respawned: list[str] = []
        try:
            candidates = [r for r in self.store.list() if r.status in SUPERVISED]
        except CadreError as exc:
            # A malformed records file fails every load: log it, never let it out of the timer.
            log.error("supervisor cannot read the records: %s", exc.message)
            return respawned
        for record in candidates:
            if self._disposed:
                break
            try:
                if await self._reconcile_one(record):
                    respawned.append(record.id)
                    await _breathe()
            except Exception as exc:
                # One bad record never ends the pass; the others may be down too.
                log.error("supervising node %s failed: %s", record.id, exc)
        self._arm_backoff_timer()
        return respawned

    def _arm_backoff_timer(self) -> None:
        """A node waiting out its backoff gets a pass the moment the wait ends.

        Without this it would wait for the periodic sweep (a minute by default),
        so a "restarting in 10 s" countdown would sit at zero for most of a minute.
        One timer, for the earliest due node; a pass re-arms it for the next.
        """
        if self._disposed:
            return
        now = self.clock.now()
        try:
            waiting = [self.next_attempt_at(r) for r in self.store.list()
                       if r.status in SUPERVISED and r.handle and not self.orchestrator.is_running(r.handle)]
        except CadreError:
            return
        due = min((w for w in waiting if w is not None and w > now), default=None)
        if due is None:
            return
        if self._backoff_task is not None and not self._backoff_task.done():
            if self._backoff_due is not None and self._backoff_due <= due:
                return
            self._backoff_task.cancel()
        self._backoff_due = due

        async def fire() -> None:
            await self.clock.sleep((due - now).total_seconds())
            self._backoff_task = None  # this pass may arm the next one
            await self._pass_logged("backoff")

        self._backoff_task = asyncio.create_task(fire(), name="supervisor-backoff")
        self._tasks.add(self._backoff_task)
        self._backoff_task.add_done_callback(self._tasks.discard)

    async def _reconcile_one(self, record: NodeRecord) -> bool:
        # No handle: nothing was spawned yet, and the code creating it owns the record.
        if not record.handle:
            return False
        if self.orchestrator.is_running(record.handle):
            self._refill_if_healthy(record)
            return False
        if self._adopt_live_child(record):
            return False
        attempts = record.attempts
        if attempts >= self.policy.max_attempts:
            # Checked here, not only when a respawn throws: a child that spawns and
            # dies at once never throws, and would otherwise be respawned forever.
            await self.give_up(record.id, attempts, self._down_reason(record))
            return False
        if not self.backoff_elapsed(record):
            return False  # Transition.WAIT
        return await self._attempt(record)

    def _adopt_live_child(self, snapshot: NodeRecord) -> bool:
        """The record names a dead child, yet a child of this node runs: take it.

        A respawn writes the new handle to the record after the spawn (so the
        child starts without waiting for a file write). If that write fails (a
        full disk) or the host dies between the two, the child runs and
        state.json names it, but the record still names its predecessor.
        Respawning then would start a second child on the same ports; the
        record takes the running one instead. Spends no budget.
        """
        live = [h for h in self.orchestrator.handles_for(snapshot.id) if h.alive and h.id != snapshot.handle]
        if not live:
            return False
        child = live[-1]
        current = self.store.get(snapshot.id)
        if current is None or current.status not in SUPERVISED or current.handle != snapshot.handle:
            return True  # it changed under us: leave it to the next pass
        try:
            self.store.put(current.replace(handle=child.id, api_port=child.api_port, p2p_port=child.p2p_port,
                                           updated_at=iso(self.clock.now())))
        except CadreError as exc:
            log.error("node %s: could not record its running child (pid %s): %s", snapshot.id, child.pid, exc.message)
            return True  # never start a second child beside a running one
        log.info("node %s: its record takes the running child pid %s (%s)", snapshot.id, child.pid,
                 Transition.ADOPT.value)
        self.service.events.emit(EventKind.CHANGED, snapshot.id)
        return True

    def _down_reason(self, record: NodeRecord) -> str:
        handle = self.orchestrator.get(record.handle)
        code = getattr(handle, "returncode", None)
        reason = "the node did not stay running after its last respawn"
        if code is not None:
            reason += f" (exit code {code})"
        return reason

    def _with_log_tail(self, node_id: str, reason: str) -> str:
        tail = getattr(self.orchestrator, "log_tail", None)
        lines = tail(node_id, 5) if tail else []
        if not lines:
            return reason
        return reason + "\nLast log lines:\n" + self.service.redact(node_id, "\n".join(lines))

    def next_attempt_at(self, record: NodeRecord) -> datetime | None:
        """When the backoff of a down node ends; None when it may go at once or never."""
        if not record.respawn or record.attempts >= self.policy.max_attempts:
            return None
        last = parse_iso(record.respawn.last_attempt_at)
        if last is None:
            return None
        return last + self.policy.backoff(record.attempts)

    def backoff_elapsed(self, record: NodeRecord) -> bool:
        """No history, or an unparsable timestamp, is eligible at once: bad data never wedges a node."""
        if not record.respawn:
            return True
        last = parse_iso(record.respawn.last_attempt_at)
        if last is None:
            return True
        return self.clock.now() - last >= self.policy.backoff(record.attempts)

    def _refill_due(self, record: NodeRecord) -> bool:
        """An unparsable timestamp is *not* due: erasing real history is worse than keeping it."""
        if not record.respawn or record.respawn.attempts == 0:
            return False
        last = parse_iso(record.respawn.last_attempt_at)
        if last is None:
            return False
        return self.clock.now() - last > timedelta(milliseconds=self.policy.healthy_ms)

    def _refill_if_healthy(self, snapshot: NodeRecord) -> None:
        if not self._refill_due(snapshot):
            return
        # Re-read: the snapshot may be several awaits old, and writing it back
        # would undo a claim or a removal that landed meanwhile.
        current = self.store.get(snapshot.id)
        if current is None or not self._refill_due(current):
            return
        try:
            self.store.put(current.replace(respawn=current.respawn.__class__(0, current.respawn.last_attempt_at)))
            log.info("node %s stayed up; its respawn budget is full again (%s)", snapshot.id, Transition.REFILL.value)
        except CadreError as exc:
            log.error("could not refill the budget of node %s: %s", snapshot.id, exc.message)

    async def _attempt(self, record: NodeRecord) -> bool:
        count = record.id not in self._uncounted
        self._uncounted.discard(record.id)
        try:
            result = await self.service.respawn(record.id, count_attempt=count)
        except Exception as exc:
            message = exc.message if isinstance(exc, CadreError) else str(exc)
            # respawn persisted the counter; decide on what is on disk.
            current = self.store.get(record.id)
            attempts = current.attempts if current else 0
            log.warning("respawn attempt %d of node %s failed: %s", attempts, record.id, message)
            if attempts >= self.policy.max_attempts:
                await self.give_up(record.id, attempts, message)
            return False
        if result.outcome is RespawnOutcome.ABANDONED:
            log.info("respawn of node %s abandoned (record went %s)", record.id,
                     result.status.value if result.status else "missing")
            return False
        log.info("node %s respawned (%s)", record.id, Transition.RESPAWN.value)
        return True

    async def give_up(self, node_id: str, attempts: int, reason: str) -> None:
        """Stop trying: the record becomes `error` first, then the child is stopped.

        The write comes before the stop because the stop raises an exit, and the
        pass it triggers must not find a supervised record with no child. The
        work folder is kept: it holds the identity its cadre knows.
        """
        record = self.store.get(node_id)
        if record is None or record.status not in SUPERVISED:
            return  # removed or already given up on while the failing attempt ran
        message = self._with_log_tail(node_id, f"gave up after {attempts} attempts: {reason}")
        self.store.put(record.replace(status=NodeStatus.ERROR, error=message, updated_at=iso(self.clock.now())))
        log.warning("node %s: %s (%s)", node_id, message, Transition.GIVE_UP.value)
        self.service.events.emit(EventKind.CHANGED, node_id)
        self.service.events.emit(EventKind.GAVE_UP, node_id, message)
        if record.handle:
            try:
                await self.orchestrator.stop(record.handle)
            except Exception as exc:
                log.error("could not stop node %s while giving up: %s", node_id, exc)
