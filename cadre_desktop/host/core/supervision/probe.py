"""The probe: what each running node says of itself, every `probe_interval_ms`.

`GET /status` on the node's API port is both its liveness and its news: an
unclaimed node that reports `joined` was claimed from a phone; a joining node
that reports `failed` could not redeem its invitation. The probe judges
nothing: it tells the supervisor which children answered (a start that answers
spends its start mark) and which stopped answering, and the supervisor
decides. For a hosted node it writes nothing: what a child says of itself is
kept (`news`), the supervisor is told (`on_news`), and its pass's decision
writes it. Every request is bounded by a timeout, and one slow node never holds
up the others.

Nodes lent to another cadre are probed the same way (`watch` adds their
lifecycle); what their answers mean is their kind's (`RecordKind.on_status`).

Cadence: a new child is asked every 250 ms until it first answers
(`watch_node`); a node waiting for news a person is watching for (a claim from a
phone, an invitation redeemed, a seed) every `NEWS_S`, so it shows within a
second or two; a steady node (joined, seeded) only every `STEADY_FACTOR`
intervals, since its exit is seen at once through the driver and all the probe
still learns from it is that it answers. Its silence is judged against its own
period (three of them at least), never against the faster one.

A node waiting for news is not asked every `NEWS_S` when it can say so itself
(`long_poll_s`, the host's `WAIT_S`): it is asked `GET /status?wait=25&since=<its
state>` (node contract §2), which it answers the moment its state changes, or
after the wait; then again at once. One idle connection per such node, and the
claim shows the moment it happens. A node that ignores the query answers at once
and is asked at the cadence above; one whose long-poll fails is asked plainly
until it answers again. A long-poll's silence counts from when its answer was
due, so the grace is the same as for a plain ask.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from cadre_desktop import text
from cadre_desktop.errors import CadreError, OutOfDescriptors
from cadre_desktop.host.core.clock import Clock, sleep_or_kick
from cadre_desktop.host.core.driver import NodeDriver
from cadre_desktop.host.core.records.lifecycle import AnyLife, Change, Lifecycle, Supervised
from cadre_desktop.host.core.records.records import SUPERVISED, NodeRecord, NodeStatus
from cadre_desktop.host.core.supervision.decide import NodeNews
from cadre_desktop.jsontypes import JSONObject, JSONValue
from cadre_desktop.net import httpclient
from cadre_desktop.net.fdlimit import is_shortage, shortage_words

log = logging.getLogger(__name__)

#: How often a node waiting for a claim, a join or a seed is asked: a claim from the phone shows this fast.
NEWS_S = 2.0
#: A steady node (its news all in) is asked this many intervals apart.
STEADY_FACTOR = 6
#: What a steady node says of itself: nothing a person waits for.
STEADY_STATES = frozenset({"joined", "seeded"})
#: What a node says while news a person waits for may come any moment: it is waited on (`long_poll_s`).
AWAITING_STATES = frozenset({"unclaimed", "joining", "awaiting_seed"})
#: How long the host's long-poll of such a node is held (node contract §2, `GET /status?wait=`).
WAIT_S = 25.0

#: `fetch(port)` asks at once; `fetch(port, since, wait_s)` is a long-poll (only with `long_poll_s`).
Fetch = Callable[..., Awaitable[JSONObject | None]]
NODE_STATES = {"unclaimed", "joining", "joined", "failed", "awaiting_seed", "seeded"}
#: A /status answer is a few hundred bytes; anything past this is not one.
MAX_STATUS_BYTES = 64 * 1024


def sanitize_status(doc: JSONObject) -> JSONObject:
    """Only what the host uses of a node's /status, every string checked.

    A node program is anyone's code, and its answer reaches a record, the log
    and the user's terminal. Identifiers that are not clean text are dropped;
    the cadre name and the error, which are for a person, keep what they say
    with unprintable characters written as escapes.
    """
    state = doc.get("state")
    lent: JSONObject = {}
    if "donation_id" in doc:  # a lent node's (node contract §10): which donation, for which party
        lent = {"donation_id": text.clean(doc.get("donation_id"), 64), "party": text.clean(doc.get("party"), 64)}
    return {
        **lent,
        "state": state if state in NODE_STATES else None,
        "node_id": text.clean(doc.get("node_id"), 128),
        "peer_id": text.clean(doc.get("peer_id"), 128),
        "cadre": _for_a_person(doc.get("cadre"), 64),
        "error": _for_a_person(doc.get("error"), 300),
        "version": text.clean(doc.get("version"), 64),
    }


def _for_a_person(value: JSONValue, limit: int) -> str | None:
    return text.escape(value, limit) if isinstance(value, str) and value else None


def loopback_for(bind_host: str) -> str:
    """Where to reach a node that listens on `bind_host` from this machine."""
    if bind_host in ("0.0.0.0", "", "*"):
        return "127.0.0.1"
    if bind_host == "::":
        return "::1"
    return bind_host


class HttpStatusFetcher:
    """GET /status over one small h11 client (`cadre_desktop.net.httpclient`), bounded by a timeout;
    None if no good answer.

    A connection is kept for less than a probe interval (`fresh_after_s`), so each
    regular probe opens a fresh one: a node that has stopped accepting connections
    (its port flooded) is seen as not answering, instead of being read through a
    keep-alive connection it accepted long ago. The quick probes of a starting node
    still share one. With `since` and `wait_s` it is a long-poll (node contract,
    `GET /status`): the node answers once its state is no longer `since`, or after
    `wait_s`; a node that ignores the query answers at once.
    """

    def __init__(self, host: str, timeout_s: float, fresh_after_s: float = 2.5) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.fresh_after_s = fresh_after_s
        self._client = httpclient.Client(fresh_after_s=fresh_after_s, max_body=MAX_STATUS_BYTES)
        #: Long-polls on a connection of their own each (one idle connection per node waited on).
        self._waits = httpclient.Client()

    async def __call__(self, port: int, since: str | None = None, wait_s: float = 0.0) -> JSONObject | None:
        client, target = self._client, "/status"
        if since is not None and wait_s > 0:
            client, target = self._waits, f"/status?wait={wait_s:g}&since={quote(since, safe='')}"
        try:
            async with asyncio.timeout(self.timeout_s + max(0.0, wait_s)):
                answer = await client.request(self.host, port, "GET", target)
            if answer.status != 200:
                return None
            body = json.loads(answer.body)
        except (TimeoutError, httpclient.ClientError, ValueError, RecursionError, OSError) as exc:
            if is_shortage(exc) or (exc.__cause__ is not None and is_shortage(exc.__cause__)):  # not a silence
                raise OutOfDescriptors(shortage_words("Asking a node how it is")) from None
            return None
        return sanitize_status(body) if isinstance(body, dict) else None

    async def close(self) -> None:
        await self._client.close()
        await self._waits.close()


class Probe:
    def __init__(
        self,
        *,
        lifecycle: Lifecycle[NodeRecord],
        driver: NodeDriver,
        clock: Clock,
        interval_s: float,
        fetch: Fetch,
        grace_s: float | None = None,
        on_news: Callable[[str], None] | None = None,
        long_poll_s: float = 0.0,
    ) -> None:
        self.lifecycle = lifecycle
        self.store = lifecycle.store
        self.lifecycles: list[AnyLife] = [lifecycle]
        self.driver = driver
        self.clock = clock
        #: Told of news the supervisor must judge (a child stopped answering, an invitation failed).
        self.on_news = on_news
        self.interval_s = interval_s
        self.fetch = fetch
        #: How long a child that answered may go silent before it is reported unresponsive.
        self.grace_s = grace_s if grace_s is not None else max(15.0, 3 * interval_s)
        self._last_ok: dict[str, float] = {}
        #: Per child, when it was last asked and how far apart it is asked now.
        self._asked: dict[str, float] = {}
        self._period: dict[str, float] = {}
        #: Children that have answered /status at least once: "ready" in the contract.
        self._answered: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        #: The next pass asks every node, whatever its period (`probe_soon`).
        self._forced = False
        #: Nodes whose new child is watched until it first answers.
        self._starting: dict[str, asyncio.Task[None]] = {}
        #: Per child of a hosted node, the last thing it said of itself (the supervisor's pass takes it).
        self._news: dict[str, NodeNews] = {}
        #: At most this many requests in flight, so a hundred nodes never crowd one loop turn.
        self._limit = asyncio.Semaphore(8)
        #: A node waiting for news is asked with a long-poll held this long (0: never, asked every NEWS_S).
        self.long_poll_s = long_poll_s
        #: Per child, the state it last said, and its long-poll in flight with the moment its answer is due.
        self._said: dict[str, str] = {}
        self._waits: dict[str, asyncio.Task[None]] = {}
        self._due: dict[str, float] = {}
        #: When the loop's next pass is planned (`_until_next`).
        self._next_pass = 0.0
        #: Told of each child's first answer (the supervisor's start gate frees its slot).
        self._on_answer: list[Callable[[str], None]] = []

    def on_answer(self, listener: Callable[[str], None]) -> None:
        """Call `listener(handle_id)` at each child's first answer (when it becomes ready)."""
        self._on_answer.append(listener)

    def watch(self, lifecycle: AnyLife) -> None:
        """Probe another kind of record too."""
        self.lifecycles.append(lifecycle)

    def _lc(self, node_id: str) -> AnyLife:
        for lc in self.lifecycles[1:]:
            if lc.get(node_id) is not None:
                return lc
        return self.lifecycle

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="probe")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        tasks = [*self._starting.values(), *self._waits.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        close = getattr(self.fetch, "close", None)
        if close:
            await close()

    def watch_node(self, node_id: str) -> None:
        """Probe a node's new child every 250 ms until it first answers, so the UI
        can say "ready" quickly; only that node, and only while it is starting."""
        if node_id in self._starting or self._task is None:
            return
        record = self._lc(node_id).get(node_id)
        if record is None or record.handle is None or not self.driver.is_running(record.handle) or self.is_ready(
                record.handle):
            return
        task = asyncio.create_task(self._watch_start(record.handle, node_id), name=f"probe-start-{node_id}")
        self._starting[node_id] = task
        task.add_done_callback(lambda _t: self._starting.pop(node_id, None))

    async def _watch_start(self, handle_id: str, node_id: str) -> None:
        """Every 250 ms for the first seconds, then at the interval, until it answers or is replaced."""
        quick_until = self.clock.monotonic() + max(15.0, self.interval_s)
        while True:
            record = self._lc(node_id).get(node_id)
            if record is None or record.handle != handle_id or not self.driver.is_running(handle_id):
                return
            await self.probe_one(record)
            if self.is_ready(handle_id):
                return
            await self.clock.sleep(0.25 if self.clock.monotonic() < quick_until else self.interval_s)

    def is_ready(self, handle_id: str | None) -> bool:
        return handle_id in self._answered

    def unresponsive(self, handle_id: str | None) -> bool:
        """It answered once, and has not for longer than the grace since (three of its periods at least)."""
        last = self._last_ok.get(handle_id) if handle_id in self._answered else None
        if last is None:
            return False
        # A long-poll's silence counts from when its answer was due, not from when it was asked.
        last = max(last, self._due.get(handle_id or "", last))
        grace = max(self.grace_s, 3 * self._period.get(handle_id or "", 0.0))
        return self.clock.monotonic() - last > grace

    def period(self, record: Supervised) -> float:
        """How far apart this record's child is asked: quick while news is awaited, slow once steady."""
        if record.handle not in self._answered:
            return min(self.interval_s, NEWS_S)
        if record.status.value in STEADY_STATES:
            return self.interval_s * STEADY_FACTOR
        return min(self.interval_s, NEWS_S)

    def probe_soon(self) -> None:
        """Probe every node now, steady ones too, instead of at the end of their period (after a wake)."""
        self._forced = True
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                await self.probe_all()
            except Exception:  # a failed pass must not end probing for the host's life; the next one retries
                log.exception("probe pass failed")
            await sleep_or_kick(self.clock, self._until_next(), self._wake)

    def _until_next(self) -> float:
        """Until the next child is due to be asked: every `NEWS_S` at most while one that is not
        waited on awaits news, else the interval (a child of a record no pass saw yet is found then)."""
        soonest = self.interval_s
        if self.long_poll_s <= 0:
            return min(self.interval_s, NEWS_S)
        now = self.clock.monotonic()
        for handle_id, period in self._period.items():
            asked = self._asked.get(handle_id)
            if handle_id not in self._waits and asked is not None:
                soonest = min(soonest, asked + period - now)
        soonest = max(0.05, soonest)
        self._next_pass = now + soonest
        return soonest

    async def probe_all(self) -> None:
        try:
            records = [r for lc in self.lifecycles for r in lc.rows() if r.status in lc.kind.probed and r.handle]
        except CadreError as exc:
            log.error("probe cannot read the records: %s", exc.message)
            return
        live = {r.handle for r in records if self.driver.is_running(r.handle)}
        for handle_id in list(self._last_ok):
            if handle_id not in live:
                del self._last_ok[handle_id]
                self._answered.discard(handle_id)
        for book in (self._news, self._asked, self._period, self._said, self._due):
            for handle_id in [h for h in book if h not in live]:
                del book[handle_id]
        for handle_id in [h for h in self._waits if h not in live]:
            self._waits.pop(handle_id).cancel()
        now, due = self.clock.monotonic(), []
        for record in records:
            if record.handle is None or record.handle not in live or record.handle in self._waits:
                continue
            period = self._period[record.handle] = self.period(record)
            asked = self._asked.get(record.handle)
            if self._forced or asked is None or now - asked >= period - 0.01:
                self._asked[record.handle] = now
                due.append(record)
        self._forced = False
        plain = []
        for record in due:
            if record.handle is not None and self._waits_on(record):  # every due record has a handle
                self._start_wait(record.id, record.handle)
            else:
                plain.append(self.probe_one(record))
        await asyncio.gather(*plain)

    def _waits_on(self, record: Supervised) -> bool:
        """A child that answered and says it waits for news is waited on, not asked again and again."""
        return (self.long_poll_s > 0 and record.handle in self._answered and record.handle not in self._due
                and self._said.get(record.handle) in AWAITING_STATES and record.status.value not in STEADY_STATES)

    def _start_wait(self, node_id: str, handle_id: str) -> None:
        task = asyncio.create_task(self._wait_on(node_id, handle_id), name=f"probe-wait-{node_id}")
        self._waits[handle_id] = task
        task.add_done_callback(lambda t: self._wait_ended(handle_id, t))

    def _wait_ended(self, handle_id: str, task: asyncio.Task[None]) -> None:
        if self._waits.get(handle_id) is task:
            del self._waits[handle_id]
            if self._next_pass > self.clock.monotonic() + NEWS_S:
                self._wake.set()  # its ask is due sooner than the loop's next pass: measured again

    async def _wait_on(self, node_id: str, handle_id: str) -> None:
        """Long-polls of one child, one after the other, while it waits for news and honours the wait.

        A node that ignores the query answers at once with its state unchanged: it is then
        asked at the present cadence (`period`), each ask again a long-poll it may honour.
        One that does not answer is asked plainly until it answers again.
        """
        try:
            await self._long_polls(node_id, handle_id)
        except OutOfDescriptors as exc:  # the regular cadence takes this child over
            self._could_not_ask(node_id, handle_id, exc)
        except Exception:  # as a failed pass: the regular cadence takes this child over
            log.exception("probe wait on node %s failed", node_id)

    async def _long_polls(self, node_id: str, handle_id: str) -> None:
        while True:
            record = self._lc(node_id).get(node_id)
            handle = self.driver.get(handle_id)
            since = self._said.get(handle_id)
            if record is None or record.handle != handle_id or handle is None or since is None:
                return
            asked = self.clock.monotonic()
            self._due[handle_id] = asked + self.long_poll_s
            status = await self.fetch(handle.api_port, since, self.long_poll_s)
            now = self._asked[handle_id] = self.clock.monotonic()
            if status is None:  # its silence counts from when the answer was due, or from now if sooner
                self._due[handle_id] = min(self._due.get(handle_id, now), now)
            self.take(record, handle.id, status)
            held = status is not None and (status.get("state") != since or now - asked >= self.long_poll_s / 2)
            record = self._lc(node_id).get(node_id)
            if not held or record is None or not self.driver.is_running(handle_id) or not self._waits_on(record):
                return

    async def probe_one(self, snapshot: Supervised) -> None:
        handle = self.driver.get(snapshot.handle)
        if handle is None:
            return
        async with self._limit:
            try:
                status = await self.fetch(handle.api_port)
            except OutOfDescriptors as exc:
                self._could_not_ask(snapshot.id, handle.id, exc)
                return
        self.take(snapshot, handle.id, status)

    def _could_not_ask(self, node_id: str, handle_id: str, exc: OutOfDescriptors) -> None:
        """The host could not ask (no descriptor): neither an answer nor a silence. Its silence is
        counted again from here (a healthy node was judged unresponsive during a shortage)."""
        log.warning("node %s: %s", node_id, exc.message)
        if handle_id in self._last_ok:
            self._last_ok[handle_id] = self.clock.monotonic()

    def take(self, snapshot: Supervised, handle_id: str, status: JSONObject | None) -> None:
        """What one answer (or its absence) of this child means."""
        state = status.get("state") if status is not None else None
        if status is None or not isinstance(state, str) or state not in NODE_STATES:
            if self.unresponsive(handle_id) and self.driver.is_running(handle_id):
                log.warning("node %s has not answered for %.0f s", snapshot.id, self.grace_s)
                if self.on_news is not None:
                    self.on_news(snapshot.id)
            return
        self._last_ok[handle_id] = self.clock.monotonic()
        self._said[handle_id] = state
        self._due.pop(handle_id, None)
        first_answer = handle_id not in self._answered
        self._answered.add(handle_id)
        if first_answer and self.long_poll_s > 0:
            self._wake.set()  # the next pass starts waiting on it, if it waits for news
        if first_answer:
            for listener in self._on_answer:
                listener(handle_id)
        lc = self._lc(snapshot.id)
        if lc.kind.on_status is None:
            self.observe(snapshot.id, handle_id, status, first_answer)
            return
        if first_answer:
            # A start that answers spends its mark (the next start counts failures from 0).
            lc.apply(snapshot.id, Change.ANSWERED, _spend_mark, handle=handle_id)
        lc.kind.on_status(lc, snapshot.id, handle_id, status)

    def observe(self, node_id: str, handle_id: str, status: JSONObject, first_answer: bool) -> None:
        """Keep what a hosted node says of itself, about this very child; when the record does not
        say it yet (its first answer, a claim, a failed invitation, a new peer id), the supervisor
        is told, and its pass decides what to write (decide.py). The probe writes nothing."""
        state = status.get("state")  # one of NODE_STATES (`take`)
        news = NodeNews(state=state if isinstance(state, str) else None, cadre=_text(status.get("cadre"), 128),
                        peer_id=_text(status.get("peer_id"), 128), error=_text(status.get("error"), 300))
        before = self._news.get(handle_id)
        self._news[handle_id] = news
        record = self.store.get(node_id)
        if record is None or record.handle != handle_id or record.status not in SUPERVISED:
            return
        if first_answer and (record.start is None or record.start.answered):
            # Ready is news for the views, though there is nothing to write: announced, not written.
            self.lifecycle.apply(node_id, Change.ANSWERED, handle=handle_id)
        joined = news.state == "joined" and (record.status is not NodeStatus.JOINED or record.cadre != news.cadre)
        failed = news.state == "failed" and record.status is NodeStatus.JOINING
        unspent = record.start is not None and not record.start.answered
        new_peer = news.peer_id is not None and news.peer_id != record.peer_id
        if (first_answer and unspent) or joined or new_peer or (failed and before != news):
            if failed and before != news:
                log.warning("node %s: its invitation failed: %s", node_id, news.error or "no reason given")
            if self.on_news is not None:
                self.on_news(node_id)

    def news(self, handle_id: str | None) -> NodeNews | None:
        """What this child last said of itself (hosted nodes), else None."""
        return self._news.get(handle_id) if handle_id else None


def _spend_mark(record: Supervised) -> Supervised:
    if record.start is None or record.start.answered:
        return record
    return record.replace(start=dataclasses.replace(record.start, answered=True))


def _text(value: JSONValue, limit: int) -> str | None:
    """A string a node sent, made safe for a record: one printable line, bounded; else None."""
    return text.one_line(value, limit) or None if isinstance(value, str) else None
