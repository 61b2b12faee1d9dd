"""The fleet on the control API: its computers, pairing, and node calls for another computer's node.

Registered by `ControlServer` (behind its guards):

* `GET /api/fleet`: `{"computers": [{"id", "name", "address", "state", "self", "last_seen", …}]}`;
* `POST /api/fleet/invite`: `{"code", "expires_at", "address"}` (201); the code is shown to the
  person, never logged;
* `POST /api/fleet/join` with `{"code", "address"}`: pairs by the code (its text kept out of any
  logged failure);
* `PATCH /api/fleet/computers/{id}` with `{"name"}`, `DELETE /api/fleet/computers/{id}`;
* `POST /api/nodes/{id}/move` with `{"to"}`, `POST /api/nodes/{id}/failover` with `{"on": bool}`
  (refused in words outside a fleet of three computers);
* `GET /api/nodes?scope=fleet`: every computer's nodes, each with `computer` (the one query
  parameter the control API takes).

`forwarded` answers a node call (`/api/nodes/{id}`, its actions, history and logs) for a node this computer does
not host but a paired one does, over the fleet link, with that computer's own answer. A link that
fails before the answer is a 503 `computer_unreachable`: the action is not done, never said done.
"""

from __future__ import annotations

import re

from cadre_desktop.errors import InvalidState, NoSuchThing
from cadre_desktop.host.edges.control_body import read_body, refused
from cadre_desktop.host.edges.router import RouteDef, json_answer
from cadre_desktop.host.edges.served import ServedHost
from cadre_desktop.host.fleet.fleet import Fleet
from cadre_desktop.host.fleet.peers import LinkDown
from cadre_desktop.text import log_lines
from cadre_desktop.wire.httpmsg import Answer, Request

_FORWARDED = re.compile(r"^/api/nodes/([A-Za-z0-9_-]{1,64})(?:/(retry|restart|pause|resume|history|logs))?$")


def _fleet(host: ServedHost) -> Fleet:
    fleet = host.fleet
    if fleet is None:
        raise InvalidState("The host has not read its fleet yet; try again in a moment.")
    return fleet


def takes_query(request: Request) -> bool:
    """The control API's one query: `GET /api/nodes?scope=fleet`."""
    return request.path == "/api/nodes" and request.method in ("GET", "HEAD") and request.query == {"scope": "fleet"}


async def fleet_nodes(host: ServedHost) -> Answer:
    return json_answer(await _fleet(host).all_nodes())


def routes(host: ServedHost) -> list[RouteDef]:
    async def computers(request: Request) -> Answer:
        run = host.fleetrun  # the fleet's store as this computer sees it (host/fleetrun/store.py)
        store = {"state": run.store.state, "why": run.store.why} if run is not None else None
        return json_answer({**_fleet(host).computers(), "store": store})

    async def invite(request: Request) -> Answer:
        await read_body(request, set())
        return json_answer(await _fleet(host).invite(), 201)

    async def join(request: Request) -> Answer:
        body = await read_body(request, {"code", "address"})
        code, address = body.get("code"), body.get("address")
        if isinstance(code, str):
            request.secrets = [code, code.strip()]
        if not isinstance(code, str) or (address is not None and not isinstance(address, str)):
            raise refused(400, "A join takes {\"code\": \"7-ab3k-9qzp\", \"address\": \"host:port\"}.")
        return json_answer(await _fleet(host).join(code, address))

    async def rename(request: Request) -> Answer:
        body = await read_body(request, {"name"})
        return json_answer(await _fleet(host).rename(request.match_info["id"], body.get("name")))

    async def remove(request: Request) -> Answer:
        await read_body(request, set())
        return json_answer(await _fleet(host).remove(request.match_info["id"]))

    async def move(request: Request) -> Answer:
        body = await read_body(request, {"to"})
        to, run = body.get("to"), host.fleetrun
        if not isinstance(to, str) or not to.strip():
            raise refused(400, "A move takes {\"to\": \"<computer id>\"}.")
        if run is None:
            raise InvalidState("The host has not started its fleet yet; try again in a moment.")
        return json_answer(await run.move(request.match_info["id"], to.strip()[:64]))

    async def failover(request: Request) -> Answer:
        body = await read_body(request, {"on"})
        on, run = body.get("on"), host.fleetrun
        if not isinstance(on, bool):
            raise refused(400, "Failover takes {\"on\": true} or {\"on\": false}.")
        if run is None:
            raise InvalidState("This computer is in no fleet: failover needs three computers paired.")
        return json_answer(await run.failover.set(request.match_info["id"], on))

    return [("GET", "/api/fleet", computers), ("POST", "/api/fleet/invite", invite), ("POST", "/api/fleet/join", join),
            ("PATCH", "/api/fleet/computers/{id}", rename), ("DELETE", "/api/fleet/computers/{id}", remove),
            ("POST", "/api/nodes/{id}/move", move), ("POST", "/api/nodes/{id}/failover", failover)]


async def forwarded(host: ServedHost, request: Request) -> Answer | None:
    """The answer of the paired computer that hosts the node this call names; None: not another's."""
    match = _FORWARDED.match(request.path)
    fleet = host.fleet
    if match is None or fleet is None or not fleet.doc.computers:
        return None
    node_id = match.group(1)
    try:
        host.get_node(node_id)
        return None  # ours
    except NoSuchThing:
        pass
    computer = await fleet.host_of(node_id)
    if computer is None:
        return None  # nobody's: the local route says so
    body = None if request.method in ("GET", "HEAD", "DELETE") else await request.json(optional=True)
    try:
        status, doc = await fleet.forward(computer, request.method, request.path, body)
    except LinkDown as exc:
        return json_answer({"error": {"code": exc.code, "message": "Not done: " + exc.message}}, 503)
    if isinstance(doc, dict) and isinstance(doc.get("id"), str):
        doc["computer"] = computer.ref()
    if match.group(2) == "logs" and status == 200:  # another computer's lines: bounded and printable here too
        doc = {"lines": log_lines(doc.get("lines") if isinstance(doc, dict) else None), "computer": computer.ref()}
    return json_answer(doc, status)
