"""The probe: what each running node says of itself, every `probe_interval_ms`.

`GET /status` on the node's API port is both its liveness and its news: an
unclaimed node that reports `joined` was claimed from a phone; a joining node
that reports `failed` could not redeem its invitation. A child that keeps not
answering past its grace is stopped, which hands it to the supervisor's normal
crash path (and counts an attempt). Every request is bounded by a timeout, and
one slow node never holds up the others.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable

from cadre_desktop import text
from cadre_desktop.errors import CadreError
from cadre_desktop.host.clock import Clock, iso, sleep_or_kick
from cadre_desktop.host.events import EventBus, EventKind
from cadre_desktop.host.records import SUPERVISED, NodeRecord, NodeStatus

log = logging.getLogger(__name__)

Fetch = Callable[[int], Awaitable[dict[str, Any] | None]]
NODE_STATES = {"unclaimed", "joining", "joined", "failed"}
#: A /status answer is a few hundred bytes; anything past this is not one.
MAX_STATUS_BYTES = 64 * 1024


def sanitize_status(doc: dict[str, Any]) -> dict[str, Any]:
    """Only what the host uses of a node's /status, every string checked.

    A node program is anyone's code, and its answer reaches a record, the log
    and the user's terminal. Identifiers that are not clean text are dropped;
    the cadre name and the error, which are for a person, keep what they say
    with unprintable characters written as escapes.
    """
    state = doc.get("state")
    return {
        "state": state if state in NODE_STATES else None,
        "node_id": text.clean(doc.get("node_id"), 128),
        "peer_id": text.clean(doc.get("peer_id"), 128),
        "cadre": _for_a_person(doc.get("cadre"), 64),
        "error": _for_a_person(doc.get("error"), 300),
        "version": text.clean(doc.get("version"), 64),
    }


def _for_a_person(value: Any, limit: int) -> str | None:
    return text.escape(value, limit) if isinstance(value, str) and value else None


def loopback_for(bind_host: str) -> str:
    """Where to reach a node that listens on `bind_host` from this machine."""
    if bind_host in ("0.0.0.0", "", "*"):
        return "127.0.0.1"
    if bind_host == "::":
        return "::1"
    return bind_host


class HttpStatusFetcher:
    """GET /status with one shared session, bounded by a timeout; None if no good answer.

    A pooled connection is kept for less than a probe interval (`fresh_after_s`),
    so each regular probe opens a fresh one: a node that has stopped accepting
    connections (its port flooded) is seen as not answering, instead of being
    read through a keep-alive connection it accepted long ago. The quick probes
    of a starting node still share one.
    """

    def __init__(self, host: str, timeout_s: float, fresh_after_s: float = 2.5) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.fresh_after_s = fresh_after_s
        self._session = None

    async def __call__(self, port: int) -> dict[str, Any] | None:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=32, keepalive_timeout=self.fresh_after_s),
            )
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            async with self._session.get(f"http://{host}:{port}/status") as resp:
                if resp.status != 200:
                    return None
                raw = await resp.content.read(MAX_STATUS_BYTES + 1)  # a node may send anything
                if len(raw) > MAX_STATUS_BYTES:
                    return None
                body = json.loads(raw)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, RecursionError, OSError):
            return None
        return sanitize_status(body) if isinstance(body, dict) else None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class Probe:
    def __init__(
        self,
        *,
        store,
        orchestrator,
        events: EventBus,
        clock: Clock,
        interval_s: float,
        fetch: Fetch,
        grace_s: float | None = None,
    ) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.events = events
        self.clock = clock
        self.interval_s = interval_s
        self.fetch = fetch
        #: How long a child may go without answering (from its first sighting,
        #: or its last answer) before it is taken for dead.
        self.grace_s = grace_s if grace_s is not None else max(15.0, 3 * interval_s)
        self._last_ok: dict[str, float] = {}
        #: Children that have answered /status at least once: "ready" in the contract.
        self._answered: set[str] = set()
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        #: Nodes whose new child is watched until it first answers.
        self._starting: dict[str, asyncio.Task] = {}
        #: At most this many requests in flight, so a hundred nodes never crowd one loop turn.
        self._limit = asyncio.Semaphore(8)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="probe")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for task in list(self._starting.values()):
            task.cancel()
        await asyncio.gather(*self._starting.values(), return_exceptions=True)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        close = getattr(self.fetch, "close", None)
        if close:
            await close()

    def watch_node(self, node_id: str) -> None:
        """Probe a node's new child every 250 ms until it first answers, so the UI
        can say "ready" quickly; only that node, and only while it is starting."""
        if node_id in self._starting or self._task is None:
            return
        record = self.store.get(node_id)
        if record is None or not self.orchestrator.is_running(record.handle) or self.is_ready(record.handle):
            return
        task = asyncio.create_task(self._watch_start(record.handle, node_id), name=f"probe-start-{node_id}")
        self._starting[node_id] = task
        task.add_done_callback(lambda _t: self._starting.pop(node_id, None))

    async def _watch_start(self, handle_id: str, node_id: str) -> None:
        deadline = self.clock.monotonic() + self.grace_s
        while self.clock.monotonic() < deadline:
            record = self.store.get(node_id)
            if record is None or record.handle != handle_id or not self.orchestrator.is_running(handle_id):
                return
            await self.probe_one(record)
            if self.is_ready(handle_id):
                return
            await self.clock.sleep(0.25)

    def is_ready(self, handle_id: str | None) -> bool:
        return handle_id in self._answered

    def probe_soon(self) -> None:
        """Probe every node now instead of at the end of the interval (after a wake)."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                await self.probe_all()
            except Exception:
                log.exception("probe pass failed")
            await sleep_or_kick(self.clock, self.interval_s, self._wake)

    async def probe_all(self) -> None:
        try:
            records = [r for r in self.store.list() if r.status in SUPERVISED and r.handle]
        except CadreError as exc:
            log.error("probe cannot read the records: %s", exc.message)
            return
        live = {r.handle for r in records if self.orchestrator.is_running(r.handle)}
        for handle_id in list(self._last_ok):
            if handle_id not in live:
                del self._last_ok[handle_id]
                self._answered.discard(handle_id)
        await asyncio.gather(*(self.probe_one(r) for r in records if r.handle in live))

    async def probe_one(self, snapshot: NodeRecord) -> None:
        handle = self.orchestrator.get(snapshot.handle)
        if handle is None:
            return
        first_seen = self._last_ok.setdefault(handle.id, self.clock.monotonic())
        async with self._limit:
            status = await self.fetch(handle.api_port)
        if status is None or status.get("state") not in NODE_STATES:
            if self.clock.monotonic() - first_seen > self.grace_s and self.orchestrator.is_running(handle.id):
                log.warning("node %s has not answered for %.0fs; treating it as down", snapshot.id, self.grace_s)
                self._last_ok.pop(handle.id, None)
                await self.orchestrator.stop(handle.id)
            return
        self._last_ok[handle.id] = self.clock.monotonic()
        first_answer = handle.id not in self._answered
        self._answered.add(handle.id)
        # Re-read after the await: only the record of this very child may change.
        current = self.store.get(snapshot.id)
        if current is None or current.handle != handle.id or current.status not in SUPERVISED:
            return
        if not self.apply(current, status) and first_answer:
            self.events.emit(EventKind.CHANGED, current.id)  # it is ready now

    def apply(self, record: NodeRecord, status: dict[str, Any]) -> bool:
        """Take in what the node says; True when the record changed (an event went out)."""
        state = status.get("state")
        peer_id = status.get("peer_id") if isinstance(status.get("peer_id"), str) else record.peer_id
        cadre = status.get("cadre") if isinstance(status.get("cadre"), str) else None
        now = iso(self.clock.now())
        if state == "joined" and (record.status is not NodeStatus.JOINED or record.cadre != cadre):
            was = record.status
            self.store.put(record.replace(status=NodeStatus.JOINED, cadre=cadre, peer_id=peer_id,
                                          error=None, updated_at=now))
            self.events.emit(EventKind.CHANGED, record.id)
            if was is not NodeStatus.JOINED:
                log.info("node %s joined cadre %r", record.id, cadre)
                self.events.emit(EventKind.CLAIMED, record.id, cadre or "")
        elif state == "failed" and record.status is NodeStatus.JOINING:
            reason = str(status.get("error") or "no reason given")[:300]
            message = f"invitation failed: {reason}"
            self.store.put(record.replace(status=NodeStatus.ERROR, error=message, peer_id=peer_id, updated_at=now))
            log.warning("node %s: %s", record.id, message)
            self.events.emit(EventKind.CHANGED, record.id)
            self.events.emit(EventKind.GAVE_UP, record.id, message)
            # Stopped after the write, like a give-up; the work folder stays.
            task = asyncio.ensure_future(self.orchestrator.stop(record.handle))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif peer_id != record.peer_id:
            self.store.put(record.replace(peer_id=peer_id, updated_at=now))
            self.events.emit(EventKind.CHANGED, record.id)
        else:
            return False
        return True
