"""What a paired computer may ask over the fleet link: the control API's own node calls, nothing more.

`GET /api/nodes`, `GET /api/nodes/{id}`, `POST /api/nodes/{id}/retry|restart|pause|resume`,
`DELETE /api/nodes/{id}`, `GET /api/nodes/{id}/history`, `GET /api/nodes/{id}/logs` (a node's
QR is its view's `claim_url`); and the fleet's own: `GET /fleet/hello` (who, the time, how busy:
the reachability check, the clock's difference, `load.py`), `POST /fleet/introduce` (the computer that paired
us names a new member), `POST /fleet/sleeping` (the asker goes to sleep: shown `asleep`, not
unreachable), `DELETE /fleet/pair` (the asker unpairs itself from us). Anything else is a
404; errors are `{"error": {"code", "message"}}` as on the control API. Its answers are the control
API's, so a forwarded call answers the CLI exactly as a local one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from cadre_desktop.errors import ApiError, CadreError, InputError, Invalid, NoSuchThing
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleet.link import ASKER
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.text import LOG_LINES, log_lines
from cadre_desktop.wire.httpmsg import Answer, Request

_NODE = re.compile(r"^/api/nodes/([A-Za-z0-9_-]{1,64})(?:/(retry|restart|pause|resume|history|logs))?$")


class LocalNodes(Protocol):
    """What the link asks of this computer's host (the Host, or a fake in unit tests)."""

    def list_nodes(self) -> list[NodeView]: ...
    def get_node(self, node_id: str) -> NodeView: ...
    async def settled(self) -> None: ...
    async def retry_node(self, node_id: str) -> NodeView: ...
    async def restart_node(self, node_id: str) -> NodeView: ...
    async def resume_node(self, node_id: str) -> NodeView: ...
    async def remove_node(self, node_id: str) -> bool: ...
    async def pause_node(self, node_id: str, *, for_ms: int | None = None, until: datetime | None = None) -> NodeView: ...
    def node_history(self, node_id: str) -> JSONObject: ...
    def log_tail(self, node_id: str, lines: int = 200) -> list[str]: ...


class FleetSide(Protocol):
    """What the link asks of the fleet service itself."""

    def hello(self) -> JSONObject: ...
    async def introduced(self, by: Computer, doc: object) -> None: ...
    async def unpaired_by(self, computer: Computer) -> None: ...
    def peer_sleeping(self, computer: Computer) -> None: ...


_VIEW_FIELDS = frozenset(f.name for f in dataclasses.fields(NodeView))


def as_view(doc: dict[str, Any]) -> NodeView | None:
    """Another computer's node as a view (its fields this version knows), None when it is not one."""
    try:
        return NodeView(**{k: v for k, v in doc.items() if k in _VIEW_FIELDS})
    except (TypeError, ValueError):
        return None


def answer(doc: object, status: int = 200) -> Answer:
    return Answer(status, [("Content-Type", "application/json; charset=utf-8")], json.dumps(doc).encode())


def error_answer(status: int, code: str, message: str) -> Answer:
    return answer({"error": {"code": code, "message": message}}, status)


def _status(exc: CadreError) -> int:
    if isinstance(exc, NoSuchThing):
        return 404
    return 409 if isinstance(exc, InputError) and exc.code == "invalid_state" else 400 if isinstance(exc, InputError) else 500


class LinkApi:
    def __init__(self, host: LocalNodes, fleet: FleetSide) -> None:
        self.host = host
        self.fleet = fleet

    async def __call__(self, request: Request) -> Answer:
        try:
            return await self._route(request)
        except ApiError as exc:
            return error_answer(exc.status, exc.code, exc.message)
        except CadreError as exc:
            return error_answer(_status(exc), exc.code, exc.message)

    async def _route(self, request: Request) -> Answer:
        method, path = request.method, request.path
        if request.query_string:
            raise Invalid("The fleet link takes no query parameters.")
        if path == "/fleet/hello" and method == "GET":
            return answer(self.fleet.hello())
        if path == "/fleet/introduce" and method == "POST":
            await self.fleet.introduced(ASKER.get(), await request.json())
            return answer({"ok": True})
        if path == "/fleet/sleeping" and method == "POST":
            self.fleet.peer_sleeping(ASKER.get())
            return answer({"ok": True})
        if path == "/fleet/pair" and method == "DELETE":
            await self.fleet.unpaired_by(ASKER.get())
            return answer({"unpaired": True})
        run_api = getattr(self.fleet, "run_api", None)  # the fleet's shared state's calls (host/fleetrun)
        if path.startswith("/fleet/run/") and run_api is not None:
            answered: Answer = await run_api(request, ASKER.get())
            return answered
        if path == "/api/nodes" and method == "GET":
            await self.host.settled()
            return answer({"nodes": [view.to_json() for view in self.host.list_nodes()]})
        match = _NODE.match(path)
        if match is None:
            return error_answer(404, "not_found", "The fleet link has no such call.")
        node_id, action = match.group(1), match.group(2)
        act = self._calls(node_id, request).get((method, action))
        if act is None:
            return error_answer(405, "method_not_allowed", "The fleet link does not take that here.")
        return await act()

    def _calls(self, node_id: str, request: Request) -> dict[tuple[str, str | None], Callable[[], Awaitable[Answer]]]:
        host = self.host

        async def view(call: Callable[[str], Awaitable[NodeView]]) -> Answer:
            await request.json(optional=True)
            return answer((await call(node_id)).to_json())

        async def get() -> Answer:
            await host.settled()
            return answer(host.get_node(node_id).to_json())

        async def remove() -> Answer:
            existed = await host.remove_node(node_id)
            return answer({"removed": node_id, "existed": bool(existed), "orphan_pids": []})

        async def pause() -> Answer:
            for_ms, until = _pause_body(await request.json(optional=True))
            return answer((await host.pause_node(node_id, for_ms=for_ms, until=until)).to_json())

        async def history() -> Answer:
            return answer(host.node_history(node_id))

        async def logs() -> Answer:
            host.get_node(node_id)  # an unknown node is a 404 before any file is read
            lines = await asyncio.to_thread(host.log_tail, node_id, LOG_LINES)
            return answer({"lines": log_lines(lines)})

        return {("GET", None): get, ("DELETE", None): remove, ("POST", "pause"): pause,
                ("POST", "retry"): lambda: view(host.retry_node), ("POST", "restart"): lambda: view(host.restart_node),
                ("POST", "resume"): lambda: view(host.resume_node), ("GET", "history"): history, ("GET", "logs"): logs}


def _pause_body(body: dict[str, Any]) -> tuple[int | None, datetime | None]:
    for_ms, until = body.get("for_ms"), body.get("until")
    if set(body) - {"for_ms", "until"} or (for_ms is not None and until is not None):
        raise Invalid("A pause takes {}, {\"for_ms\": N} or {\"until\": \"<RFC 3339>\"}.")
    if for_ms is not None and (not isinstance(for_ms, int) or isinstance(for_ms, bool) or not 0 < for_ms <= 366 * 86_400_000):
        raise Invalid("'for_ms' is a whole number of milliseconds, at most a year.")
    if until is None:
        return for_ms, None
    try:
        return None, datetime.fromisoformat(str(until)[:40])
    except ValueError:
        raise Invalid("'until' is a time in RFC 3339.") from None
