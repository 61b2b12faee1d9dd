"""A planned move of a node to another computer of the fleet, and its arrival there.

The source's steps, each refused in words with nothing changed until the take:

1. the node is here, running and answering (a node mid-start or down is refused), the target
   is a paired computer (by id or name), the fleet's store answers (one bounded read of the
   node's shared state), and the target says it can take it (`POST /fleet/run/move/check`:
   reachable, no node of that id, its store ready);
2. one etcd transaction (`SharedState.take`, `expected_holder` this computer, or none for a
   node never taken) makes the target the holder at generation g+1;
3. this computer's copy is stopped (a person's pause: no respawn, no notification);
4. the node's portable state (`bundle`), its record's name, cadre and settings (caps,
   `always_run`) and its claim secret go to the target over the fleet link
   (`POST /fleet/run/move/in`), which is mutual TLS 1.3 between the two pinned keys: the
   bundle travels encrypted to the target's pinned key by the link itself, and is written
   there only into the target's own work folder and keyring;
5. the target starts it; the source waits (bounded) until the target's copy answers with the
   same peer id, then removes its own record, work folder and keyring entries.

A failure after the take (the target refused, the link dropped, the copy did not answer in
time) gives the node back: the target is told to drop its copy (best effort), a second take
makes this computer the holder again (g+2), and the node is resumed here. The reason is
raised, in words, to the caller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cadre_desktop.errors import CadreError, Invalid, InvalidState, NoSuchThing
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.core.records.records import NodeMode, NodeRecord, NodeStatus, caps_from_row
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleetrun.bundle import check_bundle, read_bundle, write_bundle
from cadre_desktop.host.fleetrun.holding import LeaseHold
from cadre_desktop.host.fleetstate.shared import NodeShared, TakeResult
from cadre_desktop.text import clean

log = logging.getLogger(__name__)

#: How long the target's copy may take to answer.
SERVE_S = 30.0
ASK_S = 20.0
Ask = Callable[[Computer, str, str, Any, float], Awaitable[tuple[int, Any]]]


class Taker(Protocol):
    """The one transaction a move makes (`SharedState.take`)."""

    async def take(self, node: str, computer: str, expected: int, *, holder: str | None, mark_at: float,
                   failures: int = 0, last_exit: str | None = None) -> TakeResult: ...


class Store(Protocol):
    def store(self) -> Taker: ...
    async def refresh(self, node: str) -> NodeShared: ...


@dataclass(frozen=True)
class LocalSide:
    """What a move needs of this computer's host (the Host's own calls)."""

    view: Callable[[str], NodeView]
    record: Callable[[str], NodeRecord | None]
    secret: Callable[[str], Awaitable[str | None]]
    pause: Callable[[str], Awaitable[object]]
    resume: Callable[[str], Awaitable[object]]
    remove: Callable[[str], Awaitable[bool]]
    node_dir: Callable[[str], Path]
    adopt: Callable[[NodeRecord, str, NodeStatus], Awaitable[NodeRecord]]
    now: Callable[[], float]


def _error(doc: Any, status: int) -> str:
    error = doc.get("error", {}) if isinstance(doc, dict) else {}
    return clean(error.get("message"), 300) or f"it answered {status}"


class Mover:
    def __init__(self, *, me: Callable[[], str], computers: Callable[[], tuple[Computer, ...]], local: LocalSide,
                 store: Store, ask: Ask, serve_s: float = SERVE_S, poll_s: float = 0.2) -> None:
        self._me, self._computers, self.local, self.store, self._ask = me, computers, local, store, ask
        self.serve_s, self.poll_s = serve_s, poll_s
        self._moving: set[str] = set()
        #: Failover's record of the nodes held here under this computer's lease (`holding.py`), once wired:
        #: an arrival or a node given back is held at the generation its own read or take found.
        self.hold: LeaseHold | None = None

    def target(self, wanted: str) -> Computer:
        """A paired computer by id, else by name (a name two computers share is refused)."""
        computers = self._computers()
        by_id = [c for c in computers if c.id == wanted]
        by_name = [c for c in computers if c.name == wanted]
        if wanted == self._me():
            raise Invalid("The node is on this computer already.")
        if by_id or len(by_name) == 1:
            return (by_id or by_name)[0]
        if by_name:
            raise Invalid(f"Two computers are named {wanted!r}: give its id (cadre-desktop fleet list).")
        raise NoSuchThing(f"No computer {wanted!r} is paired with this one: nothing was moved.")

    def _movable(self, node_id: str) -> NodeView:
        view = self.local.view(node_id)
        if node_id in self._moving:
            raise InvalidState(f"Node {view.name} is being moved already.")
        if view.starting is not None or (view.running and not view.ready):
            raise InvalidState(f"Node {view.name} is starting: move it once it answers. Nothing was moved.")
        if not (view.running and view.ready) or view.status not in (NodeStatus.UNCLAIMED, NodeStatus.JOINED):
            raise InvalidState(f"Node {view.name} is not running ({view.status.value}): only a node that"
                               " answers moves. Nothing was moved.")
        return view

    async def move(self, node_id: str, to: str) -> dict[str, Any]:
        view = self._movable(node_id)
        target = self.target(to)
        self._moving.add(node_id)
        try:
            return await self._move(view, target)
        finally:
            self._moving.discard(node_id)

    async def _move(self, view: NodeView, target: Computer) -> dict[str, Any]:
        node_id, me = view.id, self._me()
        shared = await self.store.refresh(node_id)
        if shared.holder not in (None, me):
            raise InvalidState(f"The fleet's store says {shared.holder} holds node {view.name}: nothing was moved.")
        await self._check_target(target, node_id)
        record, secret = self.local.record(node_id), await self.local.secret(node_id)
        if record is None or secret is None or record.mode is not NodeMode.CLAIM:
            raise InvalidState(f"Node {view.name} has no claim secret here (a node made by an invitation"
                               " does not move yet): nothing was moved.")
        taken = await self.store.store().take(node_id, target.id, shared.generation, holder=shared.holder,
                                               mark_at=self.local.now())
        if not taken.won:
            raise InvalidState(f"Node {view.name} changed in the fleet's store meanwhile: nothing was moved.")
        log.info("move of %s to %s: generation %d taken", node_id, target.id, taken.generation)
        try:
            await self.local.pause(node_id)
            files = await asyncio.to_thread(read_bundle, self.local.node_dir(node_id))
            body = {"node": _node_doc(record, view), "secret": secret, "files": files,
                    "generation": taken.generation}
            status, doc = await self._ask(target, "POST", "/fleet/run/move/in", body, ASK_S)
            if status != 200:
                raise InvalidState(f"{target.name} refused the node: {_error(doc, status)}")
            await self._until_served(target, view)
        except (CadreError, OSError) as exc:
            words = getattr(exc, "message", None) or str(exc)
            await self._give_back(view, target, taken.generation)
            raise InvalidState(f"Node {view.name} was not moved to {target.name} and runs here again: {words}") from None
        await self.local.remove(node_id)
        log.info("node %s moved to %s at generation %d", node_id, target.id, taken.generation)
        return {"moved": node_id, "to": target.ref(), "generation": taken.generation, "peer_id": view.peer_id}

    async def _check_target(self, target: Computer, node_id: str) -> None:
        try:
            status, doc = await self._ask(target, "POST", "/fleet/run/move/check", {"node": node_id}, 5.0)
        except CadreError as exc:
            raise InvalidState(f"{exc.message} Nothing was moved.") from None
        if status != 200:
            raise InvalidState(f"{target.name} cannot take the node now: {_error(doc, status)}. Nothing was moved.")

    async def _until_served(self, target: Computer, view: NodeView) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + self.serve_s
        while loop.time() < until:
            status, doc = await self._ask(target, "GET", f"/api/nodes/{view.id}", None, 5.0)
            if status == 200 and isinstance(doc, dict) and doc.get("ready") and doc.get("peer_id") == view.peer_id:
                return
            await asyncio.sleep(self.poll_s)
        raise InvalidState(f"the copy on {target.name} did not answer with the same peer id within {self.serve_s:g} s")

    async def _give_back(self, view: NodeView, target: Computer, generation: int) -> None:
        try:
            await self._ask(target, "POST", "/fleet/run/move/drop", {"node": view.id}, 10.0)
        except CadreError as exc:
            log.warning("move of %s: %s was not told to drop its copy: %s", view.id, target.id, exc.message)
        try:
            lease, since = (self.hold.under(), self.hold.reading()) if self.hold is not None else (None, 0)
            back = await self.store.store().take(view.id, self._me(), generation, holder=target.id, mark_at=self.local.now())
            if back.won and self.hold is not None:
                self.hold.confirm_one(view.id, back.generation, lease, since)
        except CadreError as exc:
            log.warning("move of %s: the fleet's store was not given the node back: %s", view.id, exc.message)
        await self.local.resume(view.id)

    # -- the target's side ----------------------------------------------------------------

    def check_in(self, doc: object) -> None:
        """Whether this computer can take `doc["node"]` now (the store ready, no node of that id)."""
        node_id = doc.get("node") if isinstance(doc, dict) else None
        if not isinstance(node_id, str):
            raise Invalid("A move check names its node.")
        if self.local.record(node_id) is not None:
            raise InvalidState(f"A node {node_id} is on this computer already.")
        self.store.store()

    async def move_in(self, source: Computer, doc: object) -> NodeView:
        """A node arriving from `source`: the store must say this computer holds it now."""
        if not isinstance(doc, dict) or not isinstance(doc.get("node"), dict) or not isinstance(doc.get("secret"), str):
            raise Invalid("A move carries the node, its secret and its files.")
        record, status = _record_of(doc["node"])
        secret = clean(doc["secret"], 256)
        files = check_bundle(doc.get("files"))
        lease, since = (self.hold.under(), self.hold.reading()) if self.hold is not None else (None, 0)
        shared = await self.store.refresh(record.id)
        if shared.holder != self._me() or shared.generation != doc.get("generation"):
            raise InvalidState("The fleet's store does not say this computer holds the node at that generation.")
        if self.hold is not None and shared.failover:
            self.hold.confirm_one(record.id, shared.generation, lease, since)
        if secret is None:
            raise Invalid("A node's claim secret is one printable line.")
        folder = self.local.node_dir(record.id)
        await asyncio.to_thread(write_bundle, folder, files)
        try:
            # A claimed node comes up `joining` (its first start may leave it only so) until it answers `joined`.
            await self.local.adopt(record, secret, NodeStatus.JOINING if status is NodeStatus.JOINED else status)
        except BaseException:
            if self.local.record(record.id) is None:
                await asyncio.to_thread(_remove_tree, folder)
            raise
        log.info("node %s arrived from %s at generation %d", record.id, source.id, shared.generation)
        return self.local.view(record.id)

    async def drop(self, doc: object) -> bool:
        node_id = doc.get("node") if isinstance(doc, dict) else None
        if not isinstance(node_id, str) or self.local.record(node_id) is None:
            return False
        return await self.local.remove(node_id)


def _node_doc(record: NodeRecord, view: NodeView) -> dict[str, Any]:
    return {"id": record.id, "name": record.name, "cadre": record.cadre, "status": view.status.value,
            "created_at": record.created_at, **record.caps_row()}


def _record_of(doc: dict[str, Any]) -> tuple[NodeRecord, NodeStatus]:
    try:
        caps = caps_from_row("the moved node", doc)
        status = NodeStatus(str(doc.get("status")))
    except ValueError as exc:
        raise Invalid(f"A moved node's settings are not valid: {exc}") from None
    node_id, name = clean(doc.get("id"), 64), clean(doc.get("name"), 100)
    cadre = clean(doc.get("cadre"), 200) if doc.get("cadre") is not None else None
    created = clean(doc.get("created_at"), 40)
    if node_id is None or name is None or created is None or status not in (NodeStatus.UNCLAIMED, NodeStatus.JOINED):
        raise Invalid("A moved node has an id, a name, a creation time and a running status.")
    record = NodeRecord(id=node_id, name=name, status=NodeStatus.SPAWNING, mode=NodeMode.CLAIM, cadre=cadre,
                        created_at=created, updated_at=created, **caps)
    return record, status


def _remove_tree(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
