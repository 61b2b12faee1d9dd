"""The supervisor: an `unclaimed`, `joining` or `joined` node is expected to run.

One reconcile pass behind three triggers: once at start (after the driver
re-attached, catching every node that died while the host was down), on every
child exit (a crash is noticed in milliseconds; a storm of exits coalesces into
one queued pass), and a periodic sweep as the backstop. A timer also brings the
pass forward to the moment the earliest backoff or start grace ends. When a
pass runs is `passes.py`; what it does is here. How many of a pass's starts
may be booting at once is `gate.py` (a storm's starts are paced there).

A crash walks: the driver's `Exit` (`_on_exit`: its words, the EXITED event, what
the node asked for) -> the pass (`reconcile`) -> what it sees (`observe.Observer`)
-> the verdict (`decide.decide`, a pure function; every rule is there) -> carried
out here (`_carry_out`) -> the start (`starts.Starter`). Every record write goes
through the lifecycle. Passes, Retry and Restart share one serial queue, and
nothing on it ever waits for the keyring: secrets come from the gate's memory,
or the node waits for the keyring without spending its budget.

Records are reconciled to instances, never instances to records: a child no
record names is reported once at start and left running.

Hosted and lent nodes (`kinds.Kinds`) share the passes, queue, timers, decision
and effects; their kind says what is supervised or held, which secret a start
needs, and what Retry comes back to. Holds are `holds.py`. Every collaborator is
made by the composition root (`host/wiring.py`) and given here.

Timing runs on the monotonic clock. Wall-clock times in the records only carry
a wait across a host restart, and a clock stepped back never makes a wait
longer than it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from cadre_desktop.errors import CadreError, StorageError, message_of
from cadre_desktop.host.core.clock import Clock, stamp
from cadre_desktop.host.core.driver import Exit, NodeDriver
from cadre_desktop.host.core.records.lifecycle import HOSTED, AnyLife, Change, Supervised
from cadre_desktop.host.core.records.records import Hold, RespawnInfo
from cadre_desktop.host.core.supervision import orphans
from cadre_desktop.host.core.supervision.decide import Decision, StartFailure, Verdict, decide
from cadre_desktop.host.core.supervision.exits import ExitBook
from cadre_desktop.host.core.supervision.gate import StartGate
from cadre_desktop.host.core.supervision.holds import Holds
from cadre_desktop.host.core.supervision.kinds import Kinds
from cadre_desktop.host.core.supervision.observe import DecisionBook, Observer
from cadre_desktop.host.core.supervision.passes import PassSchedule, breathe
from cadre_desktop.host.core.supervision.starts import Starter
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Verdicts after which the node changed (a start done or failed, its own hold written): its next
#: look is read anew (a node that put itself to sleep wakes on its timer, not at the next sweep).
_CHANGING = (Decision.START, Decision.WAKE, Decision.HOST_RELEASE, Decision.HOLD)


def secret_kind(record: Supervised) -> SecretKind:
    return HOSTED.secret_kind(record)


class Supervisor:
    def __init__(self, *, kinds: Kinds, driver: NodeDriver, gate: KeyringGate, clock: Clock, passes: PassSchedule,
                 observer: Observer, starter: Starter, holds: Holds, exits: ExitBook, decisions: DecisionBook,
                 start_gate: StartGate, on_sweep: Callable[[], Awaitable[object]] | None = None) -> None:
        #: The kinds of record supervised here, their lifecycles and numbers.
        self.kinds = kinds
        self.driver = driver
        self.gate = gate
        self.clock = clock
        #: When passes run.
        self.passes = passes
        #: What a pass sees of a node.
        self.observer = observer
        #: The one start of a node.
        self.starter = starter
        #: Paused, sleeping and done nodes: their holds and releases.
        self.holds = holds
        #: The words for each node's last exit this process saw (or the reason it stopped it), and
        #: what the node asked for at it (run.json).
        self.exits = exits
        #: Per node, the last verdict: decision, when, how long it took, error.
        self.decisions = decisions
        #: How many children may be starting at once (`gate.py`); a pass's starts wait their turn.
        self.start_gate = start_gate
        self._on_sweep = on_sweep
        self._queue = asyncio.Lock()
        self._unsubscribe: Callable[[], None] | None = None
        #: Nodes whose next start spends nothing (a clean quit, a release waiting for its secret).
        self._uncounted: set[str] = set()
        self._waiting_keyring: set[str] = set()
        passes.serve(self.reconcile, lambda: self.kinds.policy().sweep_s, self._sweep_chores)

    # -- kinds of records (lend_host.py, live_settings.py) ------------------------------

    def watch(self, lifecycle: AnyLife) -> None:
        """Supervise another kind of record on the same passes, queue and timers."""
        self.kinds.watch(lifecycle)

    def use_settings(self, settings: Settings) -> None:
        """New supervision numbers for every kind of record, from the next decision on."""
        self.kinds.use_settings(settings)

    # -- life -------------------------------------------------------------------

    def start(self, stopped_cleanly: frozenset[str] = frozenset()) -> None:
        """Subscribe to exits, start the sweep, report orphans, run the start-up pass.

        `stopped_cleanly` names nodes the last host stopped on a clean quit: the
        start-up pass starts them again whatever their budget or backoff says,
        without counting an attempt.
        """
        if self.passes.started:
            return
        self._uncounted = set(stopped_cleanly)
        self._unsubscribe = self.driver.subscribe(self._on_exit)
        self.passes.start()
        orphans.report(orphans.find_orphans(self.driver, self.kinds.lifecycles))
        self.kick("startup")

    async def stop(self) -> None:
        """End the timers and the subscription; an in-flight pass drops what it has not reached."""
        if self._unsubscribe:
            self._unsubscribe()
            self._unsubscribe = None
        await self.passes.stop()

    async def serialize(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` on the serial queue every pass, Retry and Restart share."""
        async with self._queue:
            return await work()

    def kick(self, trigger: str) -> asyncio.Task[object] | None:
        """Run a pass soon; before `start` (the start-up pass knows the clean-quit list) this does nothing."""
        return self.passes.kick(trigger)

    async def _sweep_chores(self) -> None:
        if self._on_sweep is not None:
            try:
                await self._on_sweep()
            except Exception:  # housekeeping must not end the sweep; the next one retries
                log.exception("the sweep's housekeeping failed")
        try:
            self.driver.trim_logs()
        except Exception as exc:  # trimming logs only saves disk; the next sweep retries
            log.debug("log trim failed: %s", exc)

    def _on_exit(self, event: Exit) -> None:
        """An exit is an event at once (its words, what the node asked for); the pass it asks for
        is queued (storms coalesce)."""
        if self.passes.stopped:
            return
        if not event.requested:
            words = self.exits.seen(event)  # with code 0, what the node asked for (run.json) too
            try:
                if self.kinds.of(event.node_id).apply(event.node_id, Change.EXITED, handle=event.handle_id,
                                                      detail=words) is None:
                    log.info("node %s: the exit of child %s is no news: its record names another child or is gone",
                             event.node_id, event.handle_id)
            except StorageError as exc:
                log.error("node %s exited (%s); its record is unreadable: %s", event.node_id, words, exc.message)
            log.warning("node %s %s", event.node_id, words)
        self.passes.after_exit()

    # -- the pass -----------------------------------------------------------------

    async def reconcile(self, trigger: str | None = None) -> list[str]:
        """One pass over the records, queued behind any other pass, Retry or Restart; the ids it started.

        A trigger's pass (`trigger`: "exit", "timer", ...; `passes.py`) that fails is logged and
        the next trigger tries again; a pass called straight raises.
        """
        started: list[str] = []
        async with self._queue:
            try:
                try:
                    candidates = self._begin()
                except StorageError as exc:
                    log.error("supervisor cannot read the records: %s", exc.message)
                    return started
                waits: list[float] = []
                for lc, record in candidates:
                    if self.passes.stopped:
                        break
                    t0, verdict, error = time.perf_counter(), None, None
                    try:
                        verdict = self._verdict(lc, record)
                        if verdict.news is not None or verdict.refused_hold is not None:
                            self._take_news(lc, record, verdict)
                        if verdict.decision is Decision.GATED:
                            # Left as it is (nothing written or spent); a freed slot brings the pass that starts it.
                            self.start_gate.leave()
                            continue
                        if await self._carry_out(lc, record, verdict):
                            started.append(record.id)
                            await breathe()
                    except Exception as exc:
                        # One bad record never ends the pass; the others may be down too.
                        error = exc.message if isinstance(exc, CadreError) else f"{type(exc).__name__}: {exc}"
                        log.error("supervising node %s failed: %s", record.id, error)
                    self._looked(lc, record.id, verdict, (time.perf_counter() - t0) * 1000, error, waits)
                gated = self.start_gate.until_free()
                self.passes.arm(waits if gated is None else [*waits, gated])
            except Exception:  # a failed pass must not end supervision; the next one retries
                if trigger is None:
                    raise
                log.exception("supervisor pass (%s) failed", trigger)
                return []
        if started and trigger is not None:
            log.info("%s pass started %s", trigger, ", ".join(started))
        return started

    def _begin(self) -> list[tuple[AnyLife, Supervised]]:
        """A pass holds the queue: exits from now on need another pass, the start gate counts this
        pass's starts, and the records it looks at are read (those that cannot be started again
        from what they hold are left out, and said so once)."""
        self.passes.began()
        self.start_gate.pass_began()
        return [(lc, r) for lc, r in self.kinds.supervised() if not self.decisions.skip(lc, r)]

    def _looked(self, lc: AnyLife, node_id: str, verdict: Verdict | None, ms: float, error: str | None,
                waits: list[float]) -> None:
        """A record looked at: when it next needs a look (into `waits`), and its verdict noted."""
        due = self._due_after(lc, node_id, verdict)
        if due is not None:
            waits.append(due)
        if verdict is not None and verdict.decision is not Decision.LEAVE or error:
            self.decisions.note(node_id, verdict, ms, error)

    def _verdict(self, lc: AnyLife, record: Supervised, failure: StartFailure | None = None) -> Verdict:
        """What `decide()` says of the record, from what the observer sees (and a start that raised)."""
        obs = self.observer.observe(record, lc.kind, uncounted=record.id in self._uncounted)
        if failure is not None:
            obs = dataclasses.replace(obs, start_failure=failure)
        return decide(record, obs, self.kinds.policy(lc), lc.kind.supervised, lc.kind.held)

    def _due_after(self, lc: AnyLife, node_id: str, verdict: Verdict | None) -> float | None:
        """When this node next needs a look. The verdict says it, unless a start (done or
        failed) or its own hold changed the node: then its new start grace, its new backoff, or
        its wake."""
        if verdict is None or verdict.decision not in _CHANGING:
            return verdict.due_in_s if verdict is not None else None
        fresh = lc.get(node_id)
        return None if fresh is None else self._verdict(lc, fresh).due_in_s

    def _take_news(self, lc: AnyLife, record: Supervised, verdict: Verdict) -> None:
        """What the node said of itself, into its record, before its verdict is carried out."""
        if verdict.refused_hold is not None:
            log.warning("%s %s asked to be %s; this kind of node cannot be held, so it is restarted as usual",
                        lc.kind.noun, record.id, verdict.refused_hold)
            self.exits.refused(record.id)
        if verdict.news is None:
            return
        change, fields = verdict.news
        if lc.apply(record.id, Change(change), lambda r: r.replace(**fields), handle=record.handle) is not None \
                and change == "joined" and record.status is not fields.get("status"):
            log.info("node %s joined cadre %r", record.id, fields.get("cadre"))

    async def _carry_out(self, lc: AnyLife, record: Supervised, verdict: Verdict) -> bool:
        """Do what the verdict says (`lc`: the record's kind, carried from the pass); True when a child was started."""
        d = verdict.decision
        if d is not Decision.WAIT_KEYRING:
            self._waiting_keyring.discard(record.id)
        if d is Decision.START:
            self._uncounted.discard(record.id)
            try:
                return await self.starter.start(lc, record.id, counted=verdict.counted, expect_handle=record.handle,
                                                soon=True)
            except Exception as exc:
                if not await self._start_raised(lc, record.id, exc):
                    raise
                return False
        if d is Decision.REFILL:
            lc.apply(record.id, Change.REFILL, lambda r: r.replace(
                respawn=RespawnInfo(0, r.respawn.last_attempt_at) if r.respawn else None))
            log.info("node %s stayed up; its respawn budget is full again", record.id)
        elif d in (Decision.STALLED, Decision.HUNG):
            self.exits.stopped(record.id, verdict.reason or "")
            log.warning("node %s %s; stopping it", record.id, verdict.reason)
            lc.apply(record.id, Change.EXITED, handle=record.handle, detail=verdict.reason or "")
            await self.driver.stop(record.handle)
        elif d is Decision.GIVE_UP:
            await self.give_up(record.id, verdict.reason or "the node did not stay running", lc=lc)
        elif d is Decision.INVITATION_FAILED:
            await self.give_up(record.id, verdict.reason or "invitation failed", change=Change.INVITATION_FAILED, lc=lc)
        elif d is Decision.HOLD and verdict.hold is not None:
            # The node's own hold: `decide()` gives it only to a node whose child is down, so nothing is stopped.
            self.holds.hold(lc, record.id, Change.HOLD, *verdict.hold)
        elif d is Decision.HOST_HOLD and verdict.hold is not None:
            status, hold = verdict.hold
            await self.hold_node(record.id, Change.PAUSE, status, dataclasses.replace(hold, at=stamp(self.clock)),
                                 lc=lc)
        elif d in (Decision.HOST_RELEASE, Decision.WAKE):
            return await self.release_node(record.id, Change.RESUME if d is Decision.HOST_RELEASE else Change.WAKE,
                                           lc=lc)
        elif d is Decision.STOP_HELD:
            log.info("node %s %s; stopping its child", record.id, verdict.reason)
            await self.driver.stop(record.handle)
        elif d is Decision.WAIT_KEYRING:
            self.gate.want(record.id, lc.kind.secret_kind(record))
            if record.id not in self._waiting_keyring:
                self._waiting_keyring.add(record.id)
                lc.apply(record.id, Change.WAITING)
        return False

    async def _start_raised(self, lc: AnyLife, node_id: str, exc: Exception) -> bool:
        """A pass's start raised (its failure is in the record): True when `decide()` gave the node up."""
        message = message_of(exc)
        current = lc.get(node_id)
        log.warning("start attempt %d of %s %s failed: %s", current.attempts if current else 0, lc.kind.noun,
                    node_id, message)
        if current is None:
            return False
        verdict = self._verdict(lc, current, StartFailure(error=message, message=message, recorded=True))
        if verdict.decision is not Decision.GIVE_UP:
            return False
        await self.give_up(node_id, verdict.reason or message, lc=lc)
        return True

    # -- effects ------------------------------------------------------------------

    async def give_up(self, node_id: str, reason: str, change: Change = Change.GIVE_UP,
                      lc: AnyLife | None = None) -> None:
        """Stop trying (or a failed invitation): the record becomes `error` first, then the child is stopped.

        The write comes first because the stop raises an exit, and the pass it
        triggers must not find a supervised record with no child. The work
        folder is kept: it holds the identity its cadre knows.
        """
        lc = lc or self.kinds.of(node_id)
        record = lc.get(node_id)
        if record is None or record.status not in lc.kind.supervised:
            return
        n = record.attempts
        head = f"gave up after {n} attempt{'s' if n != 1 else ''}: {reason}" if n else f"gave up: {reason}"
        # A failed invitation is the node's own word, told as it said it.
        message = reason if change is Change.INVITATION_FAILED else self.exits.with_log_tail(node_id, head)
        if lc.apply(node_id, change, lambda r: r.replace(status=lc.kind.error, error=message),
                    detail=message, handle=record.handle if change is Change.INVITATION_FAILED else None) is None:
            return
        log.warning("%s %s: %s", lc.kind.noun, node_id, head)
        if record.handle:
            try:
                await self.driver.stop(record.handle)
            except Exception as exc:  # giving up must finish; the record says error whatever the stop did
                log.error("could not stop node %s while giving up: %s", node_id, exc)

    async def hold_node(self, node_id: str, change: Change, status: Enum, hold: Hold,
                        lc: AnyLife | None = None, record: Supervised | None = None) -> Supervised | None:
        """Hold a node (on the serial queue): its child stopped cleanly, then the hold written.

        `record`: the node as its caller just read it on the queue (else it is read here). The
        pass the stop's exit asks for waits for this queue, so it finds the record held and
        starts nothing; the write's event comes after the child is gone, so every view shows the
        node down. No attempt is spent, and no notification is sent.
        """
        lc = lc or self.kinds.of(node_id)
        record = record if record is not None else lc.get(node_id)
        if record is not None and record.handle:
            await self.driver.stop(record.handle)  # returns at once for a child that is not running
        return self.holds.hold(lc, node_id, change, status, hold)

    async def release_node(self, node_id: str, change: Change, lc: AnyLife | None = None) -> bool:
        """Release a held node (on the serial queue) and start it now, uncounted, whatever its budget
        says (the seed's demand); True when a child was started. With its secret not in memory yet,
        the next pass starts it, still uncounted."""
        lc = lc or self.kinds.of(node_id)
        fresh = self.holds.release(lc, node_id, change)
        if fresh is None:
            return False
        self.exits.forget(node_id)
        self._uncounted.add(node_id)
        if self.gate.cached(node_id, lc.kind.secret_kind(fresh)) is None:
            self.kick("released")
            return False
        self._uncounted.discard(node_id)
        return await self.starter.start(lc, node_id, counted=False, expect_handle=fresh.handle)

    async def start_now(self, node_id: str, *, counted: bool, expect_handle: str | None,
                        why: str | None = None) -> bool:
        """A person's start (Retry, Restart), on the serial queue: the last exit explains nothing
        now, and `why` is the node's last decision (not the give-up the last pass made)."""
        self.exits.forget(node_id)
        if why is not None:
            self.decisions.requested_start(node_id, why)
        return await self.starter.start(self.kinds.of(node_id), node_id, counted=counted, expect_handle=expect_handle)

    # -- what views show --------------------------------------------------------------

    def next_attempt_at(self, record: Supervised) -> datetime | None:
        """When the backoff of a down node ends (wall time, for views); None when now or never."""
        lc = self.kinds.of(record.id)
        return self.observer.next_attempt_at(record, lc.kind, self.kinds.policy(lc), self.clock.now())

    def starting(self, record: Supervised) -> str | None:
        """A start in progress (running, not answered yet) in the seed's words, else None."""
        lc = self.kinds.of(record.id)
        return self.observer.starting(record, lc.kind, self.kinds.policy(lc))

    def wake_at(self, record: Supervised) -> datetime | None:
        """When a sleeping node wakes (wall time, for views)."""
        return self.holds.wake_at(record)

    def last_decision(self, node_id: str) -> dict[str, Any] | None:
        return self.decisions.last.get(node_id)

    def last_exit(self, node_id: str) -> str | None:
        return self.exits.words(node_id)

    def exit_code(self, node_id: str) -> int | None:
        return self.exits.code(node_id)

    def waiting_for_keyring(self, node_id: str) -> bool:
        return node_id in self._waiting_keyring
