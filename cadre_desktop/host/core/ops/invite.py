"""Add another node to a cadre this host already has a node in, with no token to copy.

The owner token of a claimed node went to the phone that claimed it; the host
has its own credential instead (`CADRE_HOST_TOKEN`, node contract §1), made
anew for every start and kept in memory only, which the node accepts on a
loopback connection only. With it the host asks the node it runs for an
invitation, then starts a new node that joins with it. A node that was
started by an earlier run of the host has a token this run does not know: it
is restarted first (a deliberate restart, no budget spent).
"""

from __future__ import annotations

import asyncio
import json
import logging

from cadre_desktop.errors import InvalidState, NodeFault, NoSuchThing
from cadre_desktop.host.core.driver import NodeDriver
from cadre_desktop.host.core.ops.service import NodeService
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.host.core.supervision.probe import Probe, loopback_for
from cadre_desktop.host.core.supervision.starts import Starter
from cadre_desktop.net import httpclient

log = logging.getLogger(__name__)

READY_WAIT_S = 30.0
REQUEST_TIMEOUT_S = 5.0


class Inviter:
    """Invites through a node this host runs; its collaborators are the host's parts, typed."""

    def __init__(self, *, store: RecordStore, starter: Starter, driver: NodeDriver, service: NodeService,
                 probe: Probe, bind_host: str) -> None:
        self.store = store
        #: Keeps the host token each child it started was given.
        self.starter = starter
        self.driver = driver
        self.service = service
        self.probe = probe
        self.bind_host = bind_host

    async def invitation_from(self, node_id: str) -> tuple[NodeRecord, str]:
        """A fresh invitation into the cadre `node_id` is in, minted by that node (and the node)."""
        record = self.store.get(node_id)
        if record is None:
            raise NoSuchThing(f"There is no node {node_id!r} on this host.")
        if record.status is not NodeStatus.JOINED:
            raise InvalidState(f"Node {record.name} has not joined a cadre, so it cannot invite another node.")
        token = self._token(record)
        if token is None:
            log.info("node %s was started before this host: restarting it to give it the host's credential", node_id)
            await self.service.restart(node_id)
            record = await self._wait_ready(node_id)
            token = self._token(record)
            if token is None:
                raise InvalidState(f"Node {record.name} could not be given the host's credential; try again.")
        if record.api_port is None:
            raise InvalidState(f"Node {record.name} has no API port yet; try again.")
        return record, await _mint(loopback_for(self.bind_host), record.api_port, token, record.name)

    def _token(self, record: NodeRecord) -> str | None:
        if record.handle is None or not self.driver.is_running(record.handle):
            return None
        return self.starter.host_token(record.handle)

    async def _wait_ready(self, node_id: str) -> NodeRecord:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_WAIT_S
        while loop.time() < deadline:
            record = self.store.get(node_id)
            if record is None:
                raise NoSuchThing(f"Node {node_id} was removed meanwhile.")
            if self.probe.is_ready(record.handle):
                return record
            await asyncio.sleep(0.1)
        raise NodeFault(f"Node {node_id} did not answer within {READY_WAIT_S:.0f} s after its restart.",
                        code="node_not_answering")


async def _mint(address: str, port: int, token: str, name: str) -> str:
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            answer = await httpclient.request(address, port, "POST", "/invitations", body=b"{}", headers=[
                ("Content-Type", "application/json"), ("Authorization", f"Bearer {token}")])
        json_type = answer.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"
        body = json.loads(answer.body) if json_type else None
        status = answer.status
    except (TimeoutError, httpclient.ClientError, ValueError, RecursionError, OSError) as exc:
        raise NodeFault(f"Node {name} did not answer the request for an invitation ({type(exc).__name__}).",
                        code="node_not_answering") from None
    invitation = body.get("invitation") if status == 201 and isinstance(body, dict) else None
    if not isinstance(invitation, str) or not invitation or len(invitation) > 4096 or not invitation.isprintable():
        raise NodeFault(f"Node {name} refused to make an invitation (HTTP {status}).", code="invitation_refused")
    return invitation
