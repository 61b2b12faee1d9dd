"""The owner's lending endpoints on the control API: /api/grants and /api/donations.

Registered by `ControlServer` (behind its guards: loopback, no browsers, its
token), so nothing here checks who is asking. The grant link, which holds the
grant's token, is given only when asked for by name (`/link`) or right after a
create; lists never hold it.

    GET    /api/grants                     {"grants": [...]}
    POST   /api/grants                     {label?, max_nodes?, expires_in_s?} -> 201, with "link"
    GET    /api/grants/{id}                the grant, with "donations"
    GET    /api/grants/{id}/link           {"link"}
    POST   /api/grants/{id}/revoke         the grant (its loans ended)
    GET    /api/donations                  {"donations": [...]}
    GET    /api/donations/{id}             one lent node
    POST   /api/donations/{id}/retry       try again a lent node the host gave up on
    POST   /api/donations/{id}/pause       hold it ({} or {"for_ms": N} or {"until": "<RFC 3339>"})
    POST   /api/donations/{id}/resume      start a held lent node now
    DELETE /api/donations/{id}             end the loan
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cadre_desktop.errors import MachineError, NoSuchThing
from cadre_desktop.host.core.events import HostEvent
from cadre_desktop.host.core.records.records import is_node_id
from cadre_desktop.host.edges.control_body import pause_body, read_body
from cadre_desktop.host.edges.router import Handler, RouteDef, json_answer
from cadre_desktop.host.edges.served import ServedHost
from cadre_desktop.host.lending.views import LendingViews
from cadre_desktop.wire.httpmsg import Answer, Request

if TYPE_CHECKING:
    from cadre_desktop.host.lend_host import Lending

GRANT_FIELDS = {"label", "max_nodes", "expires_in_s"}


def _lending(host: ServedHost) -> tuple[Lending, LendingViews]:
    lending = host.lending
    if lending is None or lending.views is None:
        raise MachineError("Lending is not ready yet; try again in a moment.", code="not_ready")
    return lending, lending.views


def _id(request: Request) -> str:
    value = request.match_info["id"]
    if not is_node_id(value):
        raise NoSuchThing(f"Nothing here has the id {value[:40]!r}.")
    return value


def _action(host: ServedHost, action: str, view: str) -> Handler:
    """A POST with an empty body that does `lending.<action>(id)` and answers the row's view."""
    async def handler(request: Request) -> Answer:
        await read_body(request, set())
        (lending, views), row_id = _lending(host), _id(request)
        await getattr(lending, action)(row_id)
        return json_answer(getattr(views, view)(row_id).to_json())
    return handler


def routes(host: ServedHost) -> list[RouteDef]:
    """The routes, on the host the control API serves."""

    async def list_grants(request: Request) -> Answer:
        return json_answer({"grants": [v.to_json() for v in _lending(host)[1].grants()]})

    async def create_grant(request: Request) -> Answer:
        body = await read_body(request, GRANT_FIELDS)
        lending, views = _lending(host)
        grant = await lending.create_grant(body.get("label"), body.get("max_nodes"), body.get("expires_in_s"))
        view = views.grant(grant.id).to_json()
        view["link"] = await lending.link_of(grant.id)
        return json_answer(view, status=201)

    async def get_grant(request: Request) -> Answer:
        await host.settled()  # its lent nodes' views show what is on disk, or its save error
        (_, views), grant_id = _lending(host), _id(request)
        view = views.grant(grant_id).to_json()
        view["donations"] = [d.to_json() for d in views.donations(grant_id)]
        return json_answer(view)

    async def grant_link(request: Request) -> Answer:
        return json_answer({"link": await _lending(host)[0].link_of(_id(request))})

    async def list_donations(request: Request) -> Answer:
        await host.settled()
        return json_answer({"donations": [v.to_json() for v in _lending(host)[1].donations()]})

    async def get_donation(request: Request) -> Answer:
        await host.settled()
        return json_answer(_lending(host)[1].donation(_id(request)).to_json())

    async def pause_donation(request: Request) -> Answer:
        for_ms, until = await pause_body(request)
        (lending, views), row_id = _lending(host), _id(request)
        await lending.pause(row_id, for_ms=for_ms, until=until)
        return json_answer(views.donation(row_id).to_json())

    async def end_donation(request: Request) -> Answer:
        donation_id = request.match_info["id"]
        existed = is_node_id(donation_id) and await _lending(host)[0].end_loan(donation_id)
        return json_answer({"ended": donation_id, "existed": bool(existed)})

    return [
        ("GET", "/api/grants", list_grants),
        ("POST", "/api/grants", create_grant),
        ("GET", "/api/grants/{id}", get_grant),
        ("GET", "/api/grants/{id}/link", grant_link),
        ("POST", "/api/grants/{id}/revoke", _action(host, "revoke_grant", "grant")),
        ("GET", "/api/donations", list_donations),
        ("GET", "/api/donations/{id}", get_donation),
        ("POST", "/api/donations/{id}/retry", _action(host, "retry", "donation")),
        ("POST", "/api/donations/{id}/pause", pause_donation),
        ("POST", "/api/donations/{id}/resume", _action(host, "resume", "donation")),
        ("DELETE", "/api/donations/{id}", end_donation),
    ]


def event_data(host: ServedHost, event: HostEvent) -> dict[str, object]:
    """What an event stream carries for a lending event: the row's view, or null once it is gone."""
    lending = host.lending
    kind = "grant" if event.kind.value.startswith("grant") else "donation"
    view = None
    views = lending.views if lending is not None else None
    if views is not None:
        try:
            view = (views.grant(event.node_id) if kind == "grant" else views.donation(event.node_id)).to_json()
        except NoSuchThing:
            view = None
    return {"id": event.node_id, kind: view, "detail": event.detail}


def event_bytes(host: ServedHost, event: HostEvent) -> bytes:
    return f"event: {event.kind.value}\ndata: {json.dumps(event_data(host, event))}\n\n".encode()
