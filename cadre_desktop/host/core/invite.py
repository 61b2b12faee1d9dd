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
import logging

import aiohttp

from cadre_desktop.errors import InvalidState, NodeFault, NoSuchThing
from cadre_desktop.host.core.probe import loopback_for
from cadre_desktop.host.core.records import NodeStatus
from cadre_desktop.text import url_host

log = logging.getLogger(__name__)

READY_WAIT_S = 30.0
REQUEST_TIMEOUT_S = 5.0


async def invite_another(host, node_id: str, name: str | None = None):
    """The new node's view; it joins the cadre `node_id` is in."""
    record = host.store.get(node_id)
    if record is None:
        raise NoSuchThing(f"There is no node {node_id!r} on this host.")
    if record.status is not NodeStatus.JOINED:
        raise InvalidState(f"Node {record.name} has not joined a cadre, so it cannot invite another node.")
    token = host.supervisor.host_tokens.get(record.handle) if host.driver.is_running(record.handle) else None
    if token is None:
        log.info("node %s was started before this host: restarting it to give it the host's credential", node_id)
        await host.service.restart(node_id)
        record = await _wait_ready(host, node_id)
        token = host.supervisor.host_tokens.get(record.handle)
        if token is None:
            raise InvalidState(f"Node {record.name} could not be given the host's credential; try again.")
    invitation = await _mint(loopback_for(host.settings.bind_host), record.api_port, token, record.name)
    view = await host.join_node(invitation, name)
    log.info("node %s invited node %s into cadre %r", node_id, view.id, record.cadre)
    return view


async def _wait_ready(host, node_id: str):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_WAIT_S
    while loop.time() < deadline:
        record = host.store.get(node_id)
        if record is None:
            raise NoSuchThing(f"Node {node_id} was removed meanwhile.")
        if host.probe and host.probe.is_ready(record.handle):
            return record
        await asyncio.sleep(0.1)
    raise NodeFault(f"Node {node_id} did not answer within {READY_WAIT_S:.0f} s after its restart.",
                    code="node_not_answering")


async def _mint(address: str, port: int, token: str, name: str) -> str:
    host = url_host(address)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as session:
            async with session.post(f"http://{host}:{port}/invitations", json={},
                                    headers={"Authorization": f"Bearer {token}"}) as resp:
                body = await resp.json(content_type=None) if resp.content_type == "application/json" else None
                status = resp.status
    except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as exc:
        raise NodeFault(f"Node {name} did not answer the request for an invitation ({type(exc).__name__}).",
                        code="node_not_answering") from None
    invitation = body.get("invitation") if status == 201 and isinstance(body, dict) else None
    if not isinstance(invitation, str) or not invitation or len(invitation) > 4096 or not invitation.isprintable():
        raise NodeFault(f"Node {name} refused to make an invitation (HTTP {status}).", code="invitation_refused")
    return invitation
