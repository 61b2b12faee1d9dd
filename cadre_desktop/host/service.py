"""The node service: every change to a hosted node's life goes through here.

Add, join, respawn, retry, restart, regenerate and remove each change the
record and the orchestrator in a fixed order, re-reading the record after every
await, and emit one event. Two rules hold everywhere:

* The store is synchronous, and nothing awaits between reading a record and
  writing it back. A record read before an await is a snapshot, never written
  back as it was: a Remove or a give-up that landed meanwhile would be undone.
* Every respawn, supervisor pass, Retry and Restart runs on one serial queue
  (`serialize`), so two respawns of one node never overlap. Remove does not
  queue: it must win against a long pass, and the re-reads make it safe.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets as _random
from dataclasses import dataclass
from enum import Enum
from typing import Awaitable, Callable, TypeVar

from cadre_desktop.errors import BadRequest, CadreError, Conflict, NotFound, SecretsError
from cadre_desktop.host.clock import Clock, iso
from cadre_desktop.host.events import EventBus, EventKind
from cadre_desktop.host.records import SUPERVISED, NodeMode, NodeRecord, NodeStatus, RespawnInfo
from cadre_desktop.host.secrets import SecretKind, SecretStore, new_claim_secret
from cadre_desktop.host.store import RecordStore

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_NAME = 64
MAX_INVITATION = 4096


class RespawnOutcome(str, Enum):
    RESPAWNED = "respawned"
    #: The record was removed or left supervision while the respawn awaited; nothing counted.
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class RespawnResult:
    outcome: RespawnOutcome
    record: NodeRecord | None = None
    status: NodeStatus | None = None


def clean_name(name: str | None, fallback: str) -> str:
    if name is None:
        return fallback
    if not isinstance(name, str):
        raise BadRequest("The node name must be text.")
    name = " ".join(name.split())
    if not name:
        return fallback
    if len(name) > MAX_NAME or not name.isprintable():
        raise BadRequest(f"The node name must be at most {MAX_NAME} printable characters.")
    return name


def clean_invitation(invitation: str) -> str:
    if not isinstance(invitation, str) or not invitation.strip():
        raise BadRequest("The invitation is empty. Paste the invitation text you were given.")
    invitation = invitation.strip()
    if len(invitation) > MAX_INVITATION or re.search(r"\s", invitation) or not invitation.isprintable():
        raise BadRequest("That does not look like an invitation: it should be one line of text without spaces.")
    return invitation


class NodeService:
    def __init__(
        self,
        *,
        store: RecordStore,
        orchestrator,
        secrets: SecretStore,
        events: EventBus,
        clock: Clock,
    ) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.secrets = secrets
        self.events = events
        self.clock = clock
        self._queue = asyncio.Lock()
        #: Secrets read once are kept in this process's memory, so a respawn after a
        #: crash needs no keyring round trip (it may block on an unlock prompt, and it
        #: costs milliseconds on the hot path). They never leave the process.
        self._secret_cache: dict[tuple[str, SecretKind], str] = {}
        #: Ids whose add or join is in flight; the reap sweep leaves them alone.
        self._creating: set[str] = set()
        #: Ids whose removal clean-up is in flight; the reap sweep leaves them alone.
        self._removing: set[str] = set()
        #: Removals whose keyring step failed. The sweep does not retry them until the
        #: keyring works again: on a desktop, every call to a locked keyring can pop
        #: up an unlock prompt, and one a minute would be a storm.
        self._keyring_blocked: set[str] = set()

    # -- the serial queue ---------------------------------------------------------

    async def serialize(self, work: Callable[[], Awaitable[T]]) -> T:
        async with self._queue:
            return await work()

    # -- secrets ----------------------------------------------------------------

    def cached_secret(self, node_id: str, kind: SecretKind) -> str | None:
        return self._secret_cache.get((node_id, kind))

    async def load_secret(self, node_id: str, kind: SecretKind) -> str | None:
        value = self._secret_cache.get((node_id, kind))
        if value is None:
            value = await self.secrets.get(node_id, kind)
            self._keyring_blocked.clear()  # the keyring answered: blocked removals may go on
            if value is not None:
                self._secret_cache[(node_id, kind)] = value
        return value

    def redact(self, node_id: str, text: str) -> str:
        """Take any secret of the node out of text that came from outside (a log)."""
        for kind in SecretKind:
            value = self._secret_cache.get((node_id, kind))
            if value:
                text = text.replace(value, "<redacted>")
        return text

    async def _store_secret(self, node_id: str, kind: SecretKind, value: str) -> None:
        await self.secrets.set(node_id, kind, value)
        self._secret_cache[(node_id, kind)] = value
        self._keyring_blocked.clear()  # the keyring works: blocked removals may go on

    async def _forget_secrets(self, node_id: str) -> None:
        for kind in SecretKind:
            self._secret_cache.pop((node_id, kind), None)
        await self.secrets.delete_all(node_id)

    async def _secret_env(self, record: NodeRecord) -> dict[str, str]:
        kind = SecretKind.CLAIM if record.mode is NodeMode.CLAIM else SecretKind.INVITATION
        value = await self.load_secret(record.id, kind)
        if value is None:
            what = "claim secret" if kind is SecretKind.CLAIM else "invitation"
            raise SecretsError(
                f"The {what} of node {record.id} is missing from the keyring, so it cannot be "
                "started. Remove the node and add it again."
            )
        var = "CADRE_CLAIM_SECRET" if kind is SecretKind.CLAIM else "CADRE_INVITATION"
        return {var: value}

    def _remembered_ports(self, node_id: str) -> set[int]:
        """Ports other nodes will want back when they respawn (their claim URLs name them)."""
        return {p for r in self.store.list() if r.id != node_id for p in (r.api_port, r.p2p_port) if p}

    # -- create -------------------------------------------------------------------

    def _new_id(self) -> str:
        while True:
            node_id = "n" + _random.token_hex(4)
            if self.store.get(node_id) is None and node_id not in self.store.pending_removals():
                return node_id

    async def add(self, name: str | None = None) -> NodeRecord:
        """Create an unclaimed node with a fresh claim secret."""
        return await self._create(NodeMode.CLAIM, new_claim_secret(), name)

    async def join(self, invitation: str, name: str | None = None) -> NodeRecord:
        """Create a node that joins a cadre with an invitation from one of its members."""
        return await self._create(NodeMode.INVITATION, clean_invitation(invitation), name)

    async def _create(self, mode: NodeMode, secret: str, name: str | None) -> NodeRecord:
        # The record is written before the keyring entry: if the host dies in
        # between, a `spawning` record without a handle is what the reap sweep
        # finds and clears, keyring entry included. The other order would leave a
        # secret no record names, which nothing could ever find again.
        node_id = self._new_id()
        now = iso(self.clock.now())
        record = NodeRecord(
            id=node_id,
            name=clean_name(name, f"Node {len(self.store.list()) + 1}"),
            status=NodeStatus.SPAWNING,
            mode=mode,
            created_at=now,
            updated_at=now,
        )
        kind = SecretKind.CLAIM if mode is NodeMode.CLAIM else SecretKind.INVITATION
        self._creating.add(node_id)
        stored = False
        try:
            self.store.put(record)
            try:
                await self._store_secret(node_id, kind, secret)
                stored = True
                current = self.store.get(node_id)
                if current is None or current.status is not NodeStatus.SPAWNING:
                    raise Conflict(f"Node {node_id} was removed while it was being created.")
                var = "CADRE_CLAIM_SECRET" if kind is SecretKind.CLAIM else "CADRE_INVITATION"
                handle = self.orchestrator.spawn(node_id, {var: secret}, avoid_ports=self._remembered_ports(node_id))
            except BaseException:
                await self._unwind_create(node_id, stored=stored)
                raise
            status = NodeStatus.UNCLAIMED if mode is NodeMode.CLAIM else NodeStatus.JOINING
            record = current.replace(
                status=status,
                handle=handle.id,
                api_port=handle.api_port,
                p2p_port=handle.p2p_port,
                updated_at=iso(self.clock.now()),
            )
            try:
                self.store.put(record)
            except BaseException:
                await self._unwind_create(node_id)
                raise
        finally:
            self._creating.discard(node_id)
        log.info("node %s added (%s), pid %s", node_id, status.value, handle.pid)
        self.events.emit(EventKind.ADDED, node_id)
        return record

    async def _unwind_create(self, node_id: str, *, stored: bool = True) -> None:
        """Undo a half-done add: no record, no child, no work folder, no keyring entry.

        Same order as a Remove, tombstone first, so a host that dies half-way
        through finishes the job at its next start. If the keyring refused the
        secret (`stored` False), nothing else exists yet: only the row goes, and
        the broken keyring is not asked again.
        """
        if not stored:
            try:
                self.store.remove(node_id)
            except CadreError as exc:
                # The `spawning` row stays, and the next reap sweep clears it.
                log.error("could not remove the record of failed node %s: %s", node_id, exc.message)
            return
        try:
            self.store.mark_removed(node_id, iso(self.clock.now()))
        except CadreError as exc:
            # The `spawning` row stays, and the next reap sweep tries again.
            log.error("could not remove the record of failed node %s: %s", node_id, exc.message)
        try:
            await self._clean_up_removed(node_id)
        except Exception as exc:
            message = exc.message if isinstance(exc, CadreError) else str(exc)
            log.error("could not finish clearing failed node %s (retried later): %s", node_id, message)

    async def _clean_up_removed(self, node_id: str) -> None:
        """Stop the child, delete folder and keyring entries, then drop the tombstone.

        What fails raises, and leaves the tombstone for the reap sweep (at the
        latest, the next start) to finish the job.
        """
        self._removing.add(node_id)
        try:
            await self.orchestrator.remove_node(node_id)
            try:
                await self._forget_secrets(node_id)
            except SecretsError:
                self._keyring_blocked.add(node_id)
                raise
            self._keyring_blocked.discard(node_id)
            self.store.removal_done(node_id)
        finally:
            self._removing.discard(node_id)

    # -- respawn ---------------------------------------------------------------------

    async def respawn(self, node_id: str, *, count_attempt: bool = True) -> RespawnResult:
        """Start a node's child again from its record alone. Call it on the serial queue.

        A counted attempt is written together with the new handle, in one store
        write after the spawn, so the child starts without waiting for a file
        write (an fsync pair, a millisecond or more on the hot path). When the
        keyring read or the spawn throws, the attempt is written with the error
        before the exception leaves, so a failed spawn still spends budget (the
        caller re-reads it to decide on giving up). If the record was removed or
        given up on during the keyring read, the respawn is abandoned: nothing is
        spawned and nothing counted.
        """
        record = self.store.get(node_id)
        if record is None or record.status not in SUPERVISED:
            return RespawnResult(RespawnOutcome.ABANDONED, status=record.status if record else None)
        try:
            env = await self._secret_env(record)
        except CadreError as exc:
            self._note_error(node_id, exc.message, count_attempt=count_attempt)
            raise
        record = self.store.get(node_id)
        if record is None or record.status not in SUPERVISED:
            return RespawnResult(RespawnOutcome.ABANDONED, status=record.status if record else None)
        want = (record.api_port, record.p2p_port) if record.api_port and record.p2p_port else None
        # No await from here to the write below: the record read above is still current.
        attempted_at = iso(self.clock.now())
        try:
            handle = self.orchestrator.spawn(node_id, env, want_ports=want,
                                             avoid_ports=self._remembered_ports(node_id))
        except Exception as exc:
            message = exc.message if isinstance(exc, CadreError) else f"the node could not be started: {exc}"
            self._note_error(node_id, message, count_attempt=count_attempt)
            raise
        record = record.replace(
            handle=handle.id,
            api_port=handle.api_port,
            p2p_port=handle.p2p_port,
            respawn=RespawnInfo(record.attempts + 1, attempted_at) if count_attempt else record.respawn,
            updated_at=iso(self.clock.now()),
        )
        self.store.put(record)
        self.events.emit(EventKind.CHANGED, node_id)
        return RespawnResult(RespawnOutcome.RESPAWNED, record=record)

    def _note_error(self, node_id: str, message: str, *, count_attempt: bool = False) -> None:
        """Write the error (and the failed attempt, if it counts) on the current record."""
        current = self.store.get(node_id)
        if current is not None and current.status in SUPERVISED:
            changed = current.replace(error=message, updated_at=iso(self.clock.now()))
            if count_attempt:
                changed = changed.replace(respawn=RespawnInfo(current.attempts + 1, iso(self.clock.now())))
            try:
                self.store.put(changed)
            except CadreError as exc:
                log.error("could not record the error of node %s: %s", node_id, exc.message)
        self.events.emit(EventKind.CHANGED, node_id)

    # -- user actions ----------------------------------------------------------------

    def _require(self, node_id: str) -> NodeRecord:
        record = self.store.get(node_id)
        if record is None:
            raise NotFound(f"There is no node {node_id!r} on this host.")
        return record

    async def retry(self, node_id: str) -> NodeRecord:
        """Bring a node back from `error` with a fresh budget and respawn it now."""
        async def work() -> NodeRecord:
            record = self._require(node_id)
            if record.status is not NodeStatus.ERROR:
                raise Conflict(f"Node {record.name} is {record.status.value}; only a node in error can be retried.")
            if record.mode is NodeMode.CLAIM:
                status = NodeStatus.JOINED if record.cadre else NodeStatus.UNCLAIMED
            else:
                status = NodeStatus.JOINED if record.cadre else NodeStatus.JOINING
            # A child left over from the give-up (it is normally stopped) must go first.
            await self.orchestrator.stop_node(node_id)
            record = self._require(node_id)
            if record.status is not NodeStatus.ERROR:
                raise Conflict(f"Node {record.name} changed while it was being retried.")
            self.store.put(record.replace(status=status, error=None, respawn=None, updated_at=iso(self.clock.now())))
            self.events.emit(EventKind.CHANGED, node_id)
            log.info("node %s: retry requested", node_id)
            await self.respawn(node_id)
            return self._require(node_id)
        return await self.serialize(work)

    async def restart(self, node_id: str) -> NodeRecord:
        """Stop and start a node again; a deliberate restart never spends its budget."""
        async def work() -> NodeRecord:
            record = self._require(node_id)
            if record.status not in SUPERVISED:
                hint = " Use Retry." if record.status is NodeStatus.ERROR else ""
                raise Conflict(f"Node {record.name} is {record.status.value} and cannot be restarted.{hint}")
            restarted = await self._stop_and_respawn(node_id, "restarted")
            log.info("node %s restarted", node_id)
            return restarted
        return await self.serialize(work)

    async def _stop_and_respawn(self, node_id: str, doing: str) -> NodeRecord:
        """Stop the node's child and start it again, spending no budget (on the queue)."""
        await self.orchestrator.stop_node(node_id)
        result = await self.respawn(node_id, count_attempt=False)
        if result.outcome is RespawnOutcome.ABANDONED:
            raise Conflict(f"Node {node_id} was removed or stopped while it was being {doing}.")
        return result.record

    async def regenerate(self, node_id: str) -> NodeRecord:
        """A new claim secret for an unclaimed node; the old QR code stops working."""
        async def work() -> NodeRecord:
            record = self._require(node_id)
            if record.status is not NodeStatus.UNCLAIMED or record.mode is not NodeMode.CLAIM:
                raise Conflict(f"Node {record.name} is {record.status.value}; only an unclaimed node has a claim code.")
            await self._store_secret(node_id, SecretKind.CLAIM, new_claim_secret())
            renewed = await self._stop_and_respawn(node_id, "given a new claim code")
            log.info("node %s: new claim code", node_id)
            return renewed
        return await self.serialize(work)

    async def remove(self, node_id: str) -> bool:
        """Delete a node: record first, then its child, then its folder and keyring entries.

        The record goes first so the exit that stopping the child raises finds
        nothing to respawn; it leaves a tombstone in the same write, so a host
        that dies before the clean-up ends finishes it at its next start rather
        than leaving a child and a keyring secret that nothing names. Removing
        a node that is already gone is not an error (and finishes any clean-up
        left pending). A clean-up that fails (a locked keyring) raises; the node
        is gone from the list, and a later Remove or start finishes the job.
        """
        existed = self.store.mark_removed(node_id, iso(self.clock.now()))
        if existed:
            self.events.emit(EventKind.REMOVED, node_id)
        await self._clean_up_removed(node_id)
        if existed:
            log.info("node %s removed", node_id)
        return existed

    async def reap_stuck(self) -> list[str]:
        """Finish what an earlier run left half-done.

        Records left in `spawning` with no handle (the host died mid-add) are
        unwound; removals whose clean-up did not end (the host died mid-remove,
        or the keyring failed) are finished. Work in flight in this run is left
        alone.
        """
        reaped = []
        for record in self.store.list():
            if record.status is NodeStatus.SPAWNING and record.handle is None and record.id not in self._creating:
                log.warning("node %s was left half-created by an earlier run; clearing it", record.id)
                await self._unwind_create(record.id)
                self.events.emit(EventKind.REMOVED, record.id)
                reaped.append(record.id)
        for node_id in self.store.pending_removals():
            if node_id in self._removing or node_id in self._creating or node_id in self._keyring_blocked:
                continue
            log.warning("the removal of node %s was left unfinished; finishing it", node_id)
            try:
                await self._clean_up_removed(node_id)
            except Exception as exc:
                message = exc.message if isinstance(exc, CadreError) else str(exc)
                log.error("could not finish removing node %s (retried later): %s", node_id, message)
                continue
            reaped.append(node_id)
        return reaped
