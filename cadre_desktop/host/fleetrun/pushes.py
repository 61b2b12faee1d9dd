"""Replicas of the failover nodes held here, pushed to every paired computer (replicas.py keeps them there).

Each held failover node is pushed (over the fleet link, `POST /fleet/run/replica`) when failover is
turned on, when it is taken over here and has answered, and whenever its bundle changes (a hash,
looked at every `PUSH_S`); a push that did not reach every computer is tried again at the next
pass. When the node is no longer held here its replicas are dropped everywhere
(`/fleet/run/replica/drop`: each computer drops only what this one sent), unless another computer
took it over: then they stay until the new holder's replace them, since they may be the only
ones a next failover can start from (the new holder may go before it has sent its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence

from cadre_desktop.errors import CadreError
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleetrun.bundle import read_bundle
from cadre_desktop.host.fleetrun.moves import Ask, LocalSide, _node_doc
from cadre_desktop.host.fleetrun.replicas import PUSH_S, Replicas
from cadre_desktop.host.fleetstate.shared import NodeShared

log = logging.getLogger(__name__)


class Pushes:
    def __init__(self, *, me: Callable[[], str], computers: Callable[[], Sequence[Computer]], local: LocalSide,
                 replicas: Replicas, ask: Ask, held: Callable[[dict[str, NodeShared]], list[NodeRecord]],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._me, self._computers, self.local, self.replicas, self._ask = me, computers, local, replicas, ask
        self._held, self._monotonic = held, monotonic
        #: Per node, the digest of the replica every paired computer has, and when it was last looked at.
        self.pushed: dict[str, str] = {}
        self.pushed_at: dict[str, float] = {}

    def again(self, node_id: str) -> None:
        """The node's replica is pushed at the next `replicate`, whatever was pushed before."""
        self.pushed.pop(node_id, None)
        self.pushed_at.pop(node_id, None)

    async def replicate(self, nodes: dict[str, NodeShared]) -> None:
        held, me = {r.id: r for r in self._held(nodes)}, self._me()
        for node_id in [n for n in self.pushed if n not in held]:
            self.pushed.pop(node_id, None)
            self.pushed_at.pop(node_id, None)
            shared = nodes.get(node_id)
            # Taken over by another computer: the replicas this one sent stay until the new holder's
            # replace them (they may be the only ones a next failover can start from); else dropped.
            if shared is None or not shared.failover or shared.holder in (None, me):
                await self.drop_everywhere(node_id)
        now = self._monotonic()
        for node_id, record in held.items():
            if node_id in self.pushed and now - self.pushed_at.get(node_id, 0.0) < PUSH_S:
                continue
            await self.push(record, nodes[node_id])
        paired = {c.id for c in self._computers()}
        await self.replicas.drop_unpaired(lambda source: source in paired)

    async def push(self, record: NodeRecord, shared: NodeShared) -> None:
        try:
            view = self.local.view(record.id)
        except CadreError:
            return
        status = view.status if view.status in (NodeStatus.UNCLAIMED, NodeStatus.JOINED) else \
            NodeStatus.JOINED if record.status in (NodeStatus.JOINED, NodeStatus.JOINING) else None
        secret = await self.local.secret(record.id)
        if status is None or secret is None:
            return
        try:
            files = await asyncio.to_thread(read_bundle, self.local.node_dir(record.id))
        except (CadreError, OSError) as exc:
            log.info("failover: node %s's files are not replicated (%s)", record.id, exc)
            return
        node = {**_node_doc(record, view), "status": status.value}
        digest = hashlib.sha256(json.dumps([node, files], sort_keys=True).encode()).hexdigest()
        self.pushed_at[record.id] = self._monotonic()
        if self.pushed.get(record.id) == digest:
            return
        body = {"node": node, "secret": secret, "files": files, "generation": shared.generation}
        every = True
        for computer in self._computers():
            try:
                code, _ = await self._ask(computer, "POST", "/fleet/run/replica", body, 10.0)
                every = every and code == 200
            except CadreError as exc:
                every = False
                log.info("failover: the replica of %s did not reach %s (%s)", record.id, computer.id, exc.message)
        if every:
            self.pushed[record.id] = digest
        else:
            self.pushed_at[record.id] = 0.0  # tried again at the next pass

    async def drop_everywhere(self, node_id: str) -> None:
        for computer in self._computers():
            with contextlib.suppress(CadreError):
                await self._ask(computer, "POST", "/fleet/run/replica/drop", {"node": node_id}, 5.0)
