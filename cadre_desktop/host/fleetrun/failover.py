"""Failover: this computer's lease, the failover nodes it holds, and taking over those another lost.

One task (`Failover.start`, stopped at quit) runs a pass every `period_s` (a third of
`fleet_lease_ms`, at most the store's `READ_S`) once the fleet's store is ready, and at once when
a watch on the computers' lease keys sees one deleted (a lease expired or was revoked: a take may
be due, and it should not wait for the next pass):

1. **The lease.** A `LeaseKeeper` (ttl `fleet_lease_ms`) on the store's client, announced
   (`SharedState.announce`); a lost lease (expired: the computer slept or was cut off) gets a
   new one. Revoked at quit.
2. **Holding.** Every node of this computer whose shared state says failover on: held here,
   its deadline is moved on (`extend_node`, `lease.json`) at every pass; held by another
   computer (it was taken over while this one was away), the copy here is dropped (record,
   work folder, keyring: `remove`) without being started. When this computer's deadline is
   nearer than a pass (renewals fail, the lease is lost, the store does not answer), every
   failover node held here is stopped: its deadline is brought forward (`lease.json`), so it
   stops by itself, "stopped: this computer lost its lease"; after a wake nothing restarts
   until the store answers and a valid lease holds them again (the supervisor's `WAIT_LEASE`
   until then, also across a restart of the host: no person's pause is left behind). A
   failover node starts on a deadline ahead only once a read under this computer's current,
   announced lease found it held here (`holding.py`: `LeaseHold`, the one place of that rule;
   before the store answers, its last `lease.json`'s terms); else on one already past, and
   the supervisor does not start it at all (`WAIT_LEASE`). Every start path carries it (the
   first pass after a restart, the warm and fork paths, a restart to turn failover on).
3. **Replicas** (`replicas.py`): each failover node held here is pushed (aside: the pass never waits)
   to every paired computer when its bundle changes; dropped there when failover goes off or it goes.
4. **Taking over.** For each failover node held elsewhere whose replica is here:
   `decide_takeover` with what this computer sees; on TAKE, the lost holder is asked to stop
   it (bounded, best effort), `SharedState.take` compares what was read, and a won take
   starts the node here from its replica at the new generation (`mark_served` once it
   answers). A lost race does nothing. The computer with room: the alive one (its lease key
   present) of the smallest id but the holder, or after two lease times any with the replica.
   The lost holder is given `STOP_WAIT_S` to answer the stop before the take goes on (a frozen
   or cut-off one never answers, and its copy has stopped itself at its deadline already); the
   ask runs on, bounded by `STOP_ASK_S`, and stops a copy still there when it arrives.
5. **The leader's place** (`leadership.py`): etcd's leader is kept off the computers holding
   failover nodes when another holds fewer, so that a holder's loss costs no election (which
   would renew its lease to a whole lease time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cadre_desktop.errors import CadreError, InvalidState, NoSuchThing
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleetrun.bundle import write_bundle
from cadre_desktop.host.fleetrun.expiries import Expiries
from cadre_desktop.host.fleetrun.holding import LeaseHold, node_terms_past
from cadre_desktop.host.fleetrun.leadership import LeaderPlacement, held_counts
from cadre_desktop.host.fleetrun.moves import Ask, LocalSide, _remove_tree
from cadre_desktop.host.fleetrun.pushes import Pushes
from cadre_desktop.host.fleetrun.replicas import Replicas
from cadre_desktop.host.fleetrun.store import READ_S, FleetStore
from cadre_desktop.host.fleetrun.taking import TakerNotes
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.leases import extend_node
from cadre_desktop.host.fleetstate.shared import PREFIX, NodeShared, parse_node
from cadre_desktop.host.fleetstate.takeover import THIRD_COMPUTER, Action, FleetView, TakeoverRules, decide_takeover
from cadre_desktop.settings import Settings

log = logging.getLogger(__name__)

LOST_LEASE = "stopped: this computer lost its lease"
#: How long a lost holder is given to stop the node when asked over the link.
STOP_ASK_S = 2.0
#: How long a take waits for that answer before it goes on (a reachable holder answers in milliseconds).
STOP_WAIT_S = 0.3
SERVE_S = 60.0
#: How often the deadline watch looks (cheap: no I/O unless a renewal came or a deadline nears).
WATCH_S = 0.2


@dataclass(frozen=True)
class Hooks:
    """What failover needs of its host beyond a move's `LocalSide`."""

    records: Callable[[], Sequence[NodeRecord]]
    restart: Callable[[str], Awaitable[object]]
    moving: Callable[[str], bool]
    #: (node id, node name, from computer, to computer, why): a failover happened (history, one event).
    failed_over: Callable[[str, str, str, str, str], None]


class Failover:
    def __init__(self, *, settings: Callable[[], Settings], me: Callable[[], str],
                 computers: Callable[[], Sequence[Computer]], store: FleetStore, local: LocalSide,
                 hooks: Hooks, replicas: Replicas, ask: Ask, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._settings, self._me, self._computers = settings, me, computers
        self.store, self.local, self.hooks, self.replicas, self._ask = store, local, hooks, replicas, ask
        #: This computer's lease and the failover nodes a read under it found held here (`holding.py`).
        self.hold = LeaseHold(ttl_ms=lambda: self.ttl_ms, me=me, node_dir=local.node_dir, nodes=lambda: store.nodes)
        #: Failover nodes this host stopped itself, and why (shown in their views).
        self.stopped: dict[str, str] = {}
        #: The replicas of the failover nodes held here, on every paired computer (`pushes.py`).
        self.pushes = Pushes(me=me, computers=computers, local=local, replicas=replicas, ask=ask, held=self._held_here)
        #: What this computer has seen of the nodes held elsewhere, for the take-over decision (`taking.py`).
        self.notes = TakerNotes(monotonic)
        #: etcd's leader kept off the computers holding failover nodes (`leadership.py`).
        self.leadership = LeaderPlacement(
            me=me, client=lambda: store.client, own=lambda: store.member.client(5.0) if store.member else None,
            alive=lambda: store.store().leases_alive())
        self._taking: set[str] = set()
        self._replicating: asyncio.Task[None] | None = None
        self._replicate_again = False
        self._task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._leases_task: asyncio.Task[None] | None = None
        #: Set to run the next pass now, not at the end of the period (a lease key was deleted).
        self._wake = asyncio.Event()
        self.expiries = Expiries(store, me=me, name_of=self._name_of, wake=self._wake.set)
        self._bg: set[asyncio.Task[Any]] = set()

    @property
    def ttl_ms(self) -> int:
        return self._settings().fleet_lease_ms

    @property
    def period_s(self) -> float:
        return min(self.ttl_ms / 3000, READ_S)

    # -- life ----------------------------------------------------------------------

    @property
    def guard_s(self) -> float:
        """How near this computer's deadline its failover nodes are stopped (when renewals fail)."""
        return max(0.75, self.period_s / 2)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="fleet-failover")
            self._watch_task = asyncio.create_task(self._watch(), name="fleet-failover-watch")
            self._leases_task = asyncio.create_task(self.expiries.run(), name="fleet-failover-leases")

    async def _watch(self) -> None:
        """Between passes: each renewal moves the held nodes' deadlines on at once, and a deadline
        that nears stops them (a pass can be slow: a store that does not answer takes its timeout)."""
        extended: int | None = None
        while True:
            await asyncio.sleep(WATCH_S)
            try:
                keeper = self.hold.keeper
                left = self.left_s()
                if left is None or left < self.guard_s:
                    if self._held_here(None):
                        await self._guard(None)
                elif keeper is not None and keeper.renewed_ns != extended:
                    extended = keeper.renewed_ns
                    for record in self._held_here(None):
                        # Only a node a read under this lease found held here (never on a stale view).
                        terms = self.hold.live_terms(record.id)
                        if record.id not in self.stopped and terms is not None:
                            await asyncio.to_thread(extend_node, self.local.node_dir(record.id), terms)
            except (CadreError, OSError) as exc:
                log.info("failover: the deadline watch: %s", getattr(exc, "message", exc))

    async def stop(self) -> None:
        for task in [self._task, self._watch_task, self._leases_task, *self._bg]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, CadreError):
                    await task
        self._task = self._watch_task = self._leases_task = None
        # A lease revoked while a failover node still runs here would let another computer take it
        # at once, and the node would serve twice until the host stops it: then it expires instead.
        await self.hold.stop(revoke=not self._held_here(None))

    async def _run(self) -> None:
        while True:
            try:
                await self.one_pass()
            except CadreError as exc:
                log.info("failover: a pass failed (%s)", exc.message)
            except OSError as exc:
                log.warning("failover: a pass failed (%s)", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period_s):
                    await self._wake.wait()
            self._wake.clear()

    # -- the lease -------------------------------------------------------------------

    def left_s(self) -> float | None:
        return self.hold.left_s()

    def lease_env(self, node_id: str) -> dict[str, str]:
        """The start's lease variables (`Starter.extra_env`): `LeaseHold.lease_env`."""
        return self.hold.lease_env(node_id)

    async def _ensure_lease(self) -> None:
        await self.hold.ensure(self.store.client, self.store.store)

    # -- one pass --------------------------------------------------------------------

    async def one_pass(self) -> None:
        if self.store.state != "ready" or self.store.client is None:
            await self._guard(None)
            return
        try:
            await self._ensure_lease()
            nodes = await self._read()
        except StoreUnavailable:
            await self._guard(None)
            raise
        await self._guard(nodes)
        await self._hold(nodes)
        self._replicate(nodes)
        await self._take_over(nodes)
        await self.leadership.check(held_counts(nodes.values()))

    async def _read(self) -> dict[str, NodeShared]:
        """Every node's shared state, and what it confirms held here under the lease it was read under."""
        lease, since = self.hold.under(), self.hold.reading()
        found = await self.store.store().client.get_prefix(PREFIX + b"nodes/")
        ids = {k[len(PREFIX) + 6:].split(b"/", 1)[0].decode("ascii", "replace") for k in found}
        nodes, unreadable = {}, set()
        for node in ids:
            try:
                nodes[node] = parse_node(node, found)
            except (CadreError, ValueError):
                unreadable.add(node)
        self.store.read_elsewhere(nodes)
        self.hold.confirm(nodes, lease, since, unreadable)
        return nodes

    def _held_here(self, nodes: dict[str, NodeShared] | None) -> list[NodeRecord]:
        """The failover nodes held here: as `nodes` (else the store's cache) says, or as this host's own
        last read or take found (the store's cache may come from a read begun before this computer's take)."""
        me, known = self._me(), nodes if nodes is not None else self.store.nodes
        return [r for r in self.hooks.records()
                if ((s := known.get(r.id)) is not None and s.failover and s.holder == me) or self.hold.confirmed(r.id)]

    async def _guard(self, nodes: dict[str, NodeShared] | None) -> None:
        """Failover nodes held here stop before this computer's deadline when renewals fail."""
        left = self.left_s()
        if left is not None and left >= self.guard_s:
            return
        for record in self._held_here(nodes):
            if record.id in self.stopped:
                continue
            log.warning("failover: node %s stops here: this computer's lease could expire before it is renewed",
                        record.id)
            await self._stop_here(record.id, LOST_LEASE)

    async def _stop_here(self, node_id: str, why: str) -> None:
        """The copy here stops by itself within a second: its deadline brought forward (`lease.json`,
        node contract), and the supervisor starts it again only once a read under a valid lease finds
        it held here (`WAIT_LEASE`). Not a person's pause, which a host restarted meanwhile would
        never lift: it forgets `stopped`, and the node waits for its lease all the same."""
        self.stopped[node_id] = why
        terms, shared = self.hold.terms(node_id), self.store.nodes.get(node_id)
        generation = terms.generation if terms is not None else shared.generation if shared is not None else 0
        if generation < 1:
            return  # a copy with no generation runs outside failover: nothing of the lease to bring forward
        with contextlib.suppress(OSError):
            await asyncio.to_thread(extend_node, self.local.node_dir(node_id), node_terms_past(generation))

    async def _hold(self, nodes: dict[str, NodeShared]) -> None:
        me = self._me()
        for record in list(self.hooks.records()):
            shared = nodes.get(record.id)
            if shared is None or not shared.failover or self.hooks.moving(record.id):
                continue
            if shared.holder != me and record.id not in self._taking:
                holder = self._name_of(shared.holder)
                log.warning("failover: node %s is held by %s now; the copy here is dropped", record.id, holder)
                self.stopped[record.id] = f"held by {holder} now"
                with contextlib.suppress(CadreError):
                    await self.local.remove(record.id)
                continue
            terms = self.hold.live_terms(record.id)
            if shared.holder != me or terms is None:
                continue
            if record.id in self.stopped and (self.left_s() or 0) < 2 * self.guard_s:
                continue  # stopped here, and the lease not far enough ahead yet to run it again
            await asyncio.to_thread(extend_node, self.local.node_dir(record.id), terms)
            if self.stopped.pop(record.id, None) is not None:
                log.info("failover: node %s is held here under a valid lease again; it runs again", record.id)

    def _name_of(self, computer_id: str | None) -> str:
        for computer in self._computers():
            if computer.id == computer_id:
                return computer.name
        return computer_id or "another computer"

    # -- on and off ------------------------------------------------------------------

    def refusal(self) -> str | None:
        """Why failover cannot be turned on here, in words; None when it can."""
        computers = self._computers()
        if not computers and not self._settings().fleet_etcd_endpoints:
            return "This computer is in no fleet: pair it with two others first (cadre-desktop fleet invite)."
        if len(computers) + 1 < 3:
            return f"Failover needs three computers: {THIRD_COMPUTER}."
        return None

    async def set(self, node_id: str, on: bool) -> dict[str, Any]:
        record = self.local.record(node_id)
        if record is None:
            raise NoSuchThing(f"No node {node_id!r} on this computer.")
        if on and (why := self.refusal()) is not None:
            raise InvalidState(why)
        state = self.store.store()
        shared = await self.store.refresh(node_id)
        me = self._me()
        if shared.holder not in (None, me):
            raise InvalidState(f"The fleet's store says {self._name_of(shared.holder)} holds node {record.name}.")
        if on:
            await self._ensure_lease()
        await state.set_failover(node_id, on)
        if on and shared.generation == 0:
            taken = await state.take(node_id, me, 0, holder=None, mark_at=time.time())
            if not taken.won:
                raise InvalidState(f"Node {record.name} changed in the fleet's store meanwhile; try again.")
            await state.mark_served(node_id, me, taken.generation)
        lease, since = self.hold.under(), self.hold.reading()
        shared = await self.store.refresh(node_id)
        if on and shared.holder == me and shared.failover:
            self.hold.confirm_one(node_id, shared.generation, lease, since)
        elif not on:
            self.hold.forget(node_id)
        await self._bring_under_lease(node_id, on)
        if on:
            self.pushes.again(node_id)
            self._replicate(self.store.nodes, again=True)
        else:
            self._spawn(self.pushes.drop_everywhere(node_id))
        return {"node": node_id, "failover": on, "generation": shared.generation}

    async def _bring_under_lease(self, node_id: str, on: bool) -> None:
        """The running copy started again, so it runs under (or no longer under) the lease's deadline;
        its `lease.json` first, so a host restarted after a crash keeps the terms. A copy that cannot be
        restarted with failover on is stopped: it must never run on without a deadline."""
        terms = self.hold.terms(node_id)
        if on and terms is not None:
            await asyncio.to_thread(extend_node, self.local.node_dir(node_id), terms)
        try:
            await self.hooks.restart(node_id)
        except CadreError as exc:
            with contextlib.suppress(CadreError):
                if on and self.local.view(node_id).running:
                    log.warning("failover: node %s could not be restarted under the lease (%s); it is stopped",
                                node_id, exc.message)
                    self.stopped[node_id] = LOST_LEASE
                    await self.local.pause(node_id)

    def _replicate(self, nodes: dict[str, NodeShared], *, again: bool = False) -> None:
        """The replicas pushed aside, one round at a time: a push to a frozen or cut-off computer waits
        out its bound (10 s), and the pass, which moves deadlines on and takes nodes over, must not
        wait with it. A round asked for (`again`) while one runs follows it."""
        if self._replicating is not None and not self._replicating.done():
            self._replicate_again = self._replicate_again or again
            return
        async def rounds() -> None:
            await self.pushes.replicate(nodes)
            while self._replicate_again:
                self._replicate_again = False
                await self.pushes.replicate(self.store.nodes)
        self._replicating = self._spawn(rounds())

    def _spawn(self, work: Awaitable[Any]) -> asyncio.Task[None]:  # aside, best effort; ended at `stop`
        async def run() -> None:
            with contextlib.suppress(CadreError, OSError):
                await work
        task = asyncio.ensure_future(run())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)
        return task

    # -- the others' side (the fleet link) -------------------------------------------

    async def replica_in(self, source: Computer, doc: object) -> dict[str, Any]:
        node_id = await self.replicas.keep(source.id, doc)
        generation = doc.get("generation") if isinstance(doc, dict) else None
        self._spawn(self._say_replica(node_id, generation if isinstance(generation, int) else 0))
        return {"kept": node_id}

    async def replica_drop(self, source: Computer, doc: object) -> dict[str, Any]:
        node_id = doc.get("node") if isinstance(doc, dict) else None
        dropped = isinstance(node_id, str) and await self.replicas.drop(node_id, source=source.id)
        if dropped and isinstance(node_id, str):
            self._spawn(self._say_replica(node_id, None))
        return {"dropped": dropped}

    async def _say_replica(self, node_id: str, generation: int | None) -> None:
        """The store told that this computer keeps the node's replica (or no longer): takers choose among
        those that do (bounded; a store that does not answer leaves the choice to the fallback)."""
        await self.store.store().keeps_replica(node_id, self._me(), generation)

    async def stop_asked(self, doc: object) -> dict[str, Any]:
        """Another computer takes a node over from this one: the copy here stops now, if it is here."""
        node_id = doc.get("node") if isinstance(doc, dict) else None
        if not isinstance(node_id, str) or self.local.record(node_id) is None:
            return {"stopped": False}
        await self._stop_here(node_id, "another computer takes it over")
        return {"stopped": True}

    # -- taking over -----------------------------------------------------------------

    async def _take_over(self, nodes: dict[str, NodeShared]) -> None:
        me, left = self._me(), self.left_s()
        if left is None or left <= 2 * self.guard_s:
            return  # a node taken now would stop again at once
        theirs = [s for s in nodes.values() if s.failover and s.holder not in (None, me)]
        if not theirs:
            return
        alive = {me} | (await self.store.store().leases_alive() & {c.id for c in self._computers()})
        wanted = []
        for shared in theirs:
            if shared.holder in alive:
                self.notes.why.pop(shared.node, None)
            elif self.local.record(shared.node) is not None or shared.node in self._taking:
                self.notes.say_why(shared.node, "a copy of it is still here")
            elif not self.replicas.has(shared.node):
                self.notes.say_why(shared.node, "no replica of it here")
            else:
                wanted.append(shared)
        now = time.time()
        for shared in wanted:
            mark_seen_at = self.notes.mark_seen_at(shared, now)
            # The first choice: the alive computer of the smallest id but the holder, among those that keep
            # the node's replica (as the store says) when any does.
            keeping = (alive & shared.replicas) - {shared.holder or ""}
            chosen = min(keeping or (alive - {shared.holder or ""}))
            room = chosen == me or self.notes.lost_for(shared, alive) >= 2 * self.ttl_ms / 1000
            view = FleetView(me=me, members=len(self._computers()) + 1, quorum=True, room=room,
                             holder_lease_alive=shared.holder in alive, own_lease_left_s=left,
                             mark_seen_at=mark_seen_at)
            rules = TakeoverRules(start_grace_s=self.ttl_ms / 1000)
            verdict = decide_takeover(shared, view, rules, now)
            if verdict.action is not Action.TAKE:
                self.notes.say_why(shared.node, verdict.reason if room else f"{self._name_of(chosen)} is the first choice")
            else:
                await self._take(shared, verdict.expected, verdict.holder, verdict.reason, verdict.failures,
                                 verdict.last_exit)

    async def _take(self, shared: NodeShared, expected: int, holder: str | None, why: str, failures: int,
                    last_exit: str | None) -> None:
        node_id, me = shared.node, self._me()
        replica = await self.replicas.read(node_id)
        if replica is None:
            return
        lost = next((c for c in self._computers() if c.id == holder), None)
        if lost is not None:
            asked = self._spawn(self._ask(lost, "POST", "/fleet/run/failover/stop", {"node": node_id}, STOP_ASK_S))
            await asyncio.wait({asked}, timeout=STOP_WAIT_S)
        lease, since = self.hold.under(), self.hold.reading()
        taken = await self.store.store().take(node_id, me, expected, holder=holder, mark_at=time.time(),
                                               failures=failures, last_exit=last_exit, lost=True)
        if not taken.won:
            log.info("failover: another computer took node %s first", node_id)
            return
        log.warning("failover: node %s is taken over from %s at generation %d (%s)", node_id, holder,
                    taken.generation, why)
        self._taking.add(node_id)
        self.stopped.pop(node_id, None)  # a copy stopped here once (lost, then held elsewhere) runs again
        self.store.nodes[node_id] = NodeShared(node=node_id, holder=me, generation=taken.generation,
                                               mark=shared.mark, served=shared.served, failover=True)
        self.hold.confirm_one(node_id, taken.generation, lease, since)
        folder = self.local.node_dir(node_id)
        try:
            await asyncio.to_thread(_remove_tree, folder)  # what an earlier copy left here is not this node's
            await asyncio.to_thread(write_bundle, folder, replica.files)
            terms = self.hold.terms(node_id)
            if terms is not None:
                await asyncio.to_thread(extend_node, folder, terms)
            status = NodeStatus.JOINING if replica.status is NodeStatus.JOINED else replica.status
            await self.local.adopt(replica.record, replica.secret, status)
        except BaseException:
            self._taking.discard(node_id)
            raise
        await self.replicas.drop(node_id)
        self._spawn(self._say_replica(node_id, None))
        self.hooks.failed_over(node_id, replica.record.name, self._name_of(holder), self._name_of(me),
                               f"{self._name_of(holder)} lost its lease (asleep, off or cut off) by"
                               f" {time.strftime('%H:%M')}")
        self._spawn(self._until_served(node_id, taken.generation))

    async def _until_served(self, node_id: str, generation: int) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + SERVE_S
        try:
            while loop.time() < until:
                with contextlib.suppress(CadreError):
                    view = self.local.view(node_id)
                    if view.running and view.ready:
                        await self.store.store().mark_served(node_id, self._me(), generation)
                        self.pushes.again(node_id)  # its replicas now, not at the next look
                        self._replicate(self.store.nodes, again=True)
                        return
                await asyncio.sleep(0.25)
        finally:
            self._taking.discard(node_id)
