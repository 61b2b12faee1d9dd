"""The node service: the actions a person takes on a node.

Add, join, retry, restart, regenerate and remove. Every record write goes
through the lifecycle (re-read, checked, written and announced in one place);
starting, restarting and giving up are the supervisor's, so there is one of
each. Two rules hold everywhere:

* The store is synchronous, and nothing awaits between reading a record and
  writing it back. A record read before an await is a snapshot, never written
  back as it was: a Remove or a give-up that landed meanwhile would be undone.
* Keyring calls (bounded) happen before an action joins the supervisor's
  serial queue, never on it, so a keyring that hangs holds up nobody else.
  Remove does not queue: it must win against a long pass, and the re-reads
  make it safe.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets as _random
from datetime import datetime, timedelta
from enum import Enum
from typing import cast

from cadre_desktop.errors import Bug, InvalidState, NoSuchThing, SecretsError, StorageError, message_of
from cadre_desktop.host.core.clock import Clock, iso, stamp
from cadre_desktop.host.core.driver import NodeDriver
from cadre_desktop.host.core.ops.provision import Provisioning
from cadre_desktop.host.core.ops.validate import clean_invitation, clean_name, require_node_id
from cadre_desktop.host.core.records.lifecycle import AnyLife, Change, Lifecycle, RecordKind
from cadre_desktop.host.core.records.records import Hold, NodeMode, NodeRecord, NodeStatus
from cadre_desktop.host.core.supervision.holds import pause_end, person_hold
from cadre_desktop.host.core.supervision.kinds import Kinds
from cadre_desktop.host.core.supervision.orphans import find_orphans
from cadre_desktop.host.core.supervision.starts import Starter
from cadre_desktop.host.core.supervision.supervisor import Supervisor
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretKind, new_claim_secret

log = logging.getLogger(__name__)


class NodeService:
    def __init__(
        self,
        *,
        lifecycle: Lifecycle[NodeRecord],
        driver: NodeDriver,
        gate: KeyringGate,
        supervisor: Supervisor,
        kinds: Kinds,
        starter: Starter,
        clock: Clock,
    ) -> None:
        self.lifecycle = lifecycle
        self.store = lifecycle.store
        self.driver = driver
        self.gate = gate
        #: Its serial queue, and the holds, releases and starts a person asks for.
        self.supervisor = supervisor
        #: Which kind of record a node is.
        self.kinds = kinds
        self.clock = clock
        self.provisioning = Provisioning(lifecycle=lifecycle, gate=gate, starter=starter)
        #: Ids whose add or join is in flight; the reap sweep leaves them alone.
        self._creating: set[str] = set()
        #: Ids whose removal clean-up is in flight; the reap sweep leaves them alone.
        self._removing: set[str] = set()
        #: Removals whose keyring step failed. The sweep does not retry them until the
        #: keyring works again: on a desktop, every call to a locked keyring can pop
        #: up an unlock prompt, and one a minute would be a storm.
        self._keyring_blocked: set[str] = set()
        #: When the last node was created here (see `_creation_time`).
        self._last_created: datetime | None = None

    # -- create -------------------------------------------------------------------

    def _new_id(self) -> str:
        while True:
            node_id = "n" + _random.token_hex(4)
            if self.store.get(node_id) is None and node_id not in self.store.pending_removals():
                return node_id

    def _creation_time(self) -> datetime:
        """Now, or a millisecond after the last node made here if that is not earlier.

        Every list of nodes is in creation order, and a record keeps its time to the
        millisecond: three Adds clicked in one loop turn would otherwise tie and
        fall back on their random ids, so the list would shuffle what was asked for
        in order.
        """
        now = self.clock.now()
        now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # as a record keeps it
        if self._last_created is not None and now <= self._last_created:
            now = self._last_created + timedelta(milliseconds=1)
        self._last_created = now
        return now

    async def add(self, name: str | None = None) -> NodeRecord:
        """Create an unclaimed node with a fresh claim secret."""
        return await self._create(NodeMode.CLAIM, new_claim_secret(), name)

    async def join(self, invitation: str, name: str | None = None) -> NodeRecord:
        """Create a node that joins a cadre with an invitation from one of its members."""
        return await self._create(NodeMode.INVITATION, clean_invitation(invitation), name)

    async def _create(self, mode: NodeMode, secret: str, name: str | None) -> NodeRecord:
        """A new node's row, secret and first child (host/core/ops/provision.py), or nothing of them."""
        node_id = self._new_id()
        now = iso(self._creation_time())
        fallback = f"Node {len(self.store.list()) + 1}"
        record = NodeRecord(id=node_id, name=clean_name(name, fallback) or fallback, status=NodeStatus.SPAWNING,
                            mode=mode, created_at=now, updated_at=now)
        kind = SecretKind.CLAIM if mode is NodeMode.CLAIM else SecretKind.INVITATION
        status = NodeStatus.UNCLAIMED if mode is NodeMode.CLAIM else NodeStatus.JOINING
        self._creating.add(node_id)
        try:
            born = await self.provisioning.create(
                record, kind, secret, status=status,
                unwind=lambda row_id, stored: self._unwind_create(row_id, stored=stored),
                gone=lambda: InvalidState(f"Node {node_id} was removed while it was being created."),
            )
        finally:
            self._creating.discard(node_id)
        log.info("node %s added (%s), pid %s", node_id, status.value, born.child.pid)
        return born.record

    async def adopt(self, record: NodeRecord, secret: str, status: NodeStatus) -> NodeRecord:
        """A node that arrives from another computer (a move, host/fleetrun/moves.py): its own id, name,
        cadre and caps, its claim secret to the keyring, its work folder already written; started here
        as an add starts one, or nothing of it left (its folder included) when that fails."""
        require_node_id(record.id)
        if self.store.get(record.id) is not None or record.id in self.store.pending_removals():
            raise InvalidState(f"A node {record.id} is on this computer already.")
        self._creating.add(record.id)
        try:
            born = await self.provisioning.create(
                record.replace(status=NodeStatus.SPAWNING), SecretKind.CLAIM, secret, status=status,
                unwind=lambda row_id, stored: self._unwind_create(row_id, stored=stored),
                gone=lambda: InvalidState(f"Node {record.id} was removed while it arrived."))
        finally:
            self._creating.discard(record.id)
        log.info("node %s arrived from another computer, pid %s", record.id, born.child.pid)
        return born.record

    async def _unwind_create(self, node_id: str, *, stored: bool = True, left_over: bool = False) -> None:
        """Undo a half-done add: no record, no child, no work folder, no keyring entry.

        Same order as a Remove, tombstone first, so a host that dies half-way
        through finishes the job at its next start. If the keyring refused the
        secret (`stored` False), nothing else exists yet: only the row goes, and
        the broken keyring is not asked again.
        """
        if not stored:
            try:
                self.lifecycle.drop_unborn(node_id)
            except StorageError as exc:
                # The `spawning` row stays, and the next reap sweep clears it.
                log.error("could not remove the record of failed node %s: %s", node_id, exc.message)
            return
        try:
            self.lifecycle.mark_removed(node_id, announce_unborn=left_over)
        except StorageError as exc:
            # The `spawning` row stays, and the next reap sweep tries again.
            log.error("could not remove the record of failed node %s: %s", node_id, exc.message)
        try:
            await self._clean_up_removed(node_id)
        except Exception as exc:  # unwinding must not hide the error that made it; the reaper finishes it later
            message = message_of(exc)
            log.error("could not finish clearing failed node %s (retried later): %s", node_id, message)

    async def _clean_up_removed(self, node_id: str) -> None:
        """Stop the child, delete folder and keyring entries, then drop the tombstone.

        What fails raises, and leaves the tombstone for the reap sweep (at the
        latest, the next start) to finish the job: a removal is done only when
        the work folder is really gone.
        """
        self._removing.add(node_id)
        self.gate.drop(node_id)
        try:
            await self.driver.remove_node(node_id)
            try:
                await self.gate.forget(node_id)
            except SecretsError:
                self._keyring_blocked.add(node_id)
                raise
            self._keyring_blocked.discard(node_id)
            self.lifecycle.removal_done(node_id)
        finally:
            self._removing.discard(node_id)

    # -- user actions ----------------------------------------------------------------

    def _require(self, node_id: str) -> NodeRecord:
        """The record of any kind the supervisor keeps (a hosted node, a lent one)."""
        return self._row(node_id)[0]

    def _row(self, node_id: str) -> tuple[NodeRecord, AnyLife]:
        """The record of any kind the supervisor keeps, and the lifecycle that keeps it."""
        require_node_id(node_id)
        lc = self.kinds.of(node_id)
        record = cast("NodeRecord | None", lc.get(node_id))  # any kind's, read as a node's
        if record is None:
            raise NoSuchThing(f"There is no node {node_id!r} on this host.")
        return record, lc

    def _kind(self, node_id: str) -> RecordKind:
        return self.kinds.of(node_id).kind

    async def _load_secret(self, record: NodeRecord) -> None:
        """Read the node's secret before its action queues (bounded; raises what a person can act on)."""
        kind = self._kind(record.id)
        value = await self.gate.load(record.id, kind.secret_kind(record))
        if value is None:
            raise SecretsError(f"The secret of {kind.noun} {kind.label(record)} is missing from the keyring, so it "
                               f"cannot be started. Remove the {kind.noun} and add it again.")

    async def retry(self, node_id: str) -> NodeRecord:
        """Bring a node back from `error` (or `done`) with a fresh budget and start it now (a lent node too)."""
        record, _ = self._retryable(node_id)  # refused before the keyring is asked; checked again on the queue
        await self._load_secret(record)
        return await self._retry(node_id)

    def _retryable(self, node_id: str) -> tuple[NodeRecord, AnyLife]:
        record, lc = self._row(node_id)
        kind = lc.kind
        if record.status is not kind.error and record.status is not kind.holds.get("done"):
            raise InvalidState(f"{kind.noun.capitalize()} {kind.label(record)} is {record.status.value}; only a "
                               f"{kind.noun} in error can be retried.")
        return record, lc

    async def restart(self, node_id: str, *, only_if_running: bool = False) -> NodeRecord | None:
        """Stop and start a node again (a lent node too); a deliberate restart never spends its budget."""
        record, kind = self._require(node_id), self._kind(node_id)
        if record.status in kind.supervised and not (only_if_running and not self.driver.is_running(record.handle)):
            await self._load_secret(record)
        return await self._restart(node_id, only_if_running=only_if_running)

    async def regenerate(self, node_id: str) -> NodeRecord:
        """A new claim secret for an unclaimed node; the old QR code stops working.

        The keyring write comes first, off the queue; the restart then checks
        on the queue that the node is still unclaimed. A node claimed or given
        up on meanwhile is left as it is, and its old secret is put back, so
        the keyring always holds the secret the node runs with.
        """
        record = self._require(node_id)
        if record.status is not NodeStatus.UNCLAIMED or record.mode is not NodeMode.CLAIM:
            raise InvalidState(f"Node {record.name} is {record.status.value}; only an unclaimed node has a claim code.")
        previous = await self.gate.load(node_id, SecretKind.CLAIM)
        await self.gate.store(node_id, SecretKind.CLAIM, new_claim_secret())
        try:
            renewed = await self._restart(node_id, require=frozenset({NodeStatus.UNCLAIMED}),
                                          doing="given a new claim code")
        except InvalidState:
            # It changed meanwhile (claimed, given up on): the code it runs with stays the valid one.
            if previous is not None and self.store.get(node_id) is not None:
                await self.gate.store(node_id, SecretKind.CLAIM, previous)
            raise
        if renewed is None:
            raise Bug(f"the restart of node {node_id} for its new claim code came back empty")
        log.info("node %s: new claim code", node_id)
        return renewed

    async def _restart(self, node_id: str, *, only_if_running: bool = False,
                      require: frozenset[NodeStatus] | None = None, doing: str = "restarted") -> NodeRecord | None:
        """The one restart: stop the node's child and start it again without spending its budget.

        With `only_if_running` a node that is down is left to the crash path
        (the address watcher's restarts). `require` narrows the statuses that
        may be restarted (a new claim code only while unclaimed), checked on
        the queue, so a node claimed meanwhile is not restarted.
        """
        async def work() -> NodeRecord | None:
            record, kind = self._require(node_id), self._kind(node_id)
            if record.status not in kind.supervised:
                if only_if_running:
                    return None
                hint = (" Use Retry." if record.status is kind.error
                        else " Use Resume." if record.status in kind.held else "")
                raise InvalidState(f"{kind.noun.capitalize()} {kind.label(record)} is {record.status.value} and cannot "
                               f"be restarted.{hint}")
            if require is not None and record.status not in require:
                raise InvalidState(f"Node {record.name} is {record.status.value} now, so it was not {doing}.")
            if only_if_running and not self.driver.is_running(record.handle):
                return None
            if self.gate.cached(node_id, kind.secret_kind(record)) is None:
                raise self._keyring_error(record)
            await self.driver.stop_node(node_id)
            if not await self.supervisor.start_now(node_id, counted=False, expect_handle=record.handle):
                raise InvalidState(f"Node {node_id} was removed or stopped while it was being {doing}.")
            log.info("node %s %s", node_id, doing)
            return self._require(node_id)
        return await self.supervisor.serialize(work)

    async def _retry(self, node_id: str) -> NodeRecord:
        """Bring a node back from `error` with a fresh budget and start it now."""
        async def work() -> NodeRecord:
            record, lc = self._retryable(node_id)
            kind = lc.kind
            if self.gate.cached(node_id, kind.secret_kind(record)) is None:
                raise self._keyring_error(record)
            # A child left over from the give-up (it is normally stopped) must go first.
            await self.driver.stop_node(node_id)
            fields = kind.retry(record, stamp(self.clock))  # the status it comes back in, and what goes with it
            fresh = lc.apply(node_id, Change.RETRY, lambda r: r.replace(
                error=None, respawn=None, hold=None,
                start=dataclasses.replace(r.start, failures=0, answered=True) if r.start else None, **fields))
            if fresh is None:
                raise InvalidState(f"{kind.noun.capitalize()} {kind.label(record)} changed while it was being retried.")
            log.info("node %s: retry requested", node_id)
            await self.supervisor.start_now(node_id, counted=True, expect_handle=fresh.handle, why="retry requested")
            return self._require(node_id)
        return await self.supervisor.serialize(work)

    async def pause(self, node_id: str, *, for_ms: int | None = None, until: datetime | None = None) -> NodeRecord:
        """Hold a node: `paused` (no end), or `sleeping` for `for_ms` or until `until` (aware).

        Its child is stopped cleanly on the serial queue; no attempt is spent, no notification
        sent, and the hold is in the record, so it outlives the host. Pausing a held node again
        replaces its hold (a person's word wins over the node's own). Its end is taken and checked
        when asked; whether the node may be paused is checked on the queue, where it counts, and
        once before it, so a refusal does not wait for a pass.
        """
        wake_at = self._pause_end(node_id, for_ms, until)

        async def work() -> NodeRecord:
            record, lc, status, hold = self._person_hold(node_id, wake_at)
            if await self.supervisor.hold_node(node_id, Change.PAUSE, status, hold, lc, record) is None:
                raise InvalidState(f"Node {record.name} changed while it was being paused.")
            return self._require(node_id)
        return await self.supervisor.serialize(work)

    def _pause_end(self, node_id: str, for_ms: int | None, until: datetime | None) -> datetime | None:
        """A pause asked now, checked before it is queued: when it ends (None: no end, `for_ms`
        from now or `until`), and whether the node may be paused at all (checked again on the queue)."""
        wake_at = pause_end(self.clock.now(), for_ms, until)
        self._pausable(node_id)
        return wake_at

    def _person_hold(self, node_id: str, wake_at: datetime | None) -> tuple[NodeRecord, AnyLife, Enum, Hold]:
        """On the queue, where it counts: the node re-read and checked, its held status, and the
        person's hold from now (when the node is held)."""
        record, lc = self._pausable(node_id)
        status = lc.kind.holds["sleeping" if wake_at else "paused"]
        return record, lc, status, person_hold(self.clock.now(), wake_at)

    def _pausable(self, node_id: str) -> tuple[NodeRecord, AnyLife]:
        record, lc = self._row(node_id)
        kind = lc.kind
        if not kind.holds:
            raise InvalidState(f"A {kind.noun} cannot be paused; end its loan instead.")
        if record.status not in kind.supervised and record.status not in kind.held:
            hint = " Use Retry." if record.status is kind.error else ""
            raise InvalidState(f"{kind.noun.capitalize()} {kind.label(record)} is {record.status.value} and cannot "
                               f"be paused.{hint}")
        return record, lc

    async def resume(self, node_id: str) -> NodeRecord:
        """Someone has work for a held node (the seed's demand): start it now, its budget untouched."""
        record, _ = self._resumable(node_id)  # refused before the keyring is asked; checked again on the queue
        await self._load_secret(record)

        async def work() -> NodeRecord:
            _, lc = self._resumable(node_id, now=True)
            await self.driver.stop_node(node_id)  # a child left over from the hold goes first
            await self.supervisor.release_node(node_id, Change.RESUME, lc)
            log.info("node %s resumed", node_id)
            return self._require(node_id)
        return await self.supervisor.serialize(work)

    def _resumable(self, node_id: str, *, now: bool = False) -> tuple[NodeRecord, AnyLife]:
        record, lc = self._row(node_id)
        kind = lc.kind
        if record.status not in kind.held:
            why = " now." if now else f"; only a paused, sleeping or done {kind.noun} can be resumed."
            raise InvalidState(f"{kind.noun.capitalize()} {kind.label(record)} is {record.status.value}{why}")
        return record, lc

    def _keyring_error(self, record: NodeRecord) -> SecretsError:
        record_kind = self._kind(record.id)
        kind = record_kind.secret_kind(record)
        if self.gate.is_missing(record.id, kind):
            return SecretsError(f"The secret of {record_kind.noun} {record_kind.label(record)} is missing from the "
                                f"keyring, so it cannot be started. Remove the {record_kind.noun} and add it again.")
        cond = self.gate.condition
        self.gate.want(record.id, kind)
        return SecretsError(cond.message if cond else "The keyring has not answered yet; try again in a moment.",
                            code=cond.code if cond else "keyring_waiting")


    async def remove(self, node_id: str) -> bool:
        """Delete a node: record first, then its child, then its folder and keyring entries.

        The record goes first so the exit that stopping the child raises finds
        nothing to respawn; it leaves a tombstone in the same write, so a host
        that dies before the clean-up ends finishes it at its next start. Only
        ids this home has or had are touched. Removing a node that is already
        gone is not an error (and finishes any clean-up left pending). A
        clean-up that fails (a locked keyring, a folder that will not go)
        raises; the node is gone from the list, and a later Remove or start
        finishes the job.
        """
        require_node_id(node_id)
        existed = self.lifecycle.mark_removed(node_id)
        if not existed and node_id not in self.store.pending_removals():
            return False
        await self._clean_up_removed(node_id)
        if existed:
            log.info("node %s removed", node_id)
        return existed

    async def reclaim_orphan(self, node_id: str) -> list[int]:
        """Remove of an id no record names whose child still runs (an orphan, seed 000: "Run
        `node remove <id>` to stop it and delete its data"): it is stopped and its work folder,
        log and keyring entries deleted, as a Remove does, from a tombstone first (a host that
        dies meanwhile finishes it). The pids stopped ([] for none: then nothing is touched)."""
        require_node_id(node_id)
        found = [h for h in find_orphans(self.driver, self.kinds.lifecycles) if h.node_id == node_id]
        if not found:
            return []
        pids = [h.pid for h in found]
        self.lifecycle.mark_orphan_removed(node_id)
        await self._clean_up_removed(node_id)
        log.warning("node %s: no record names it; its orphaned child (pid %s) was stopped, and its work folder, "
                    "log and keyring entries deleted", node_id, ", ".join(map(str, pids)))
        return pids

    async def reap_stuck(self) -> list[str]:
        """Finish what an earlier run left half-done.

        Records left in `spawning` with no handle (the host died mid-add) are
        unwound; removals whose clean-up did not end (the host died mid-remove,
        the keyring failed, the folder would not go) are finished. Work in
        flight in this run is left alone.
        """
        reaped = []
        for record in self.store.list():
            if record.status is NodeStatus.SPAWNING and record.handle is None and record.id not in self._creating:
                log.warning("node %s was left half-created by an earlier run; clearing it", record.id)
                await self._unwind_create(record.id, left_over=True)
                reaped.append(record.id)
        for node_id in self.store.pending_removals():
            blocked = node_id in self._keyring_blocked and self.gate.condition is not None
            if node_id in self._removing or node_id in self._creating or blocked:
                continue
            log.warning("the removal of node %s was left unfinished; finishing it", node_id)
            try:
                await self._clean_up_removed(node_id)
            except Exception as exc:  # one removal that fails must not stop the others; the next pass retries it
                message = message_of(exc)
                log.error("could not finish removing node %s (retried later): %s", node_id, message)
                continue
            reaped.append(node_id)
        return reaped
