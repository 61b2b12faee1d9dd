"""What a paired computer may ask of the fleet's shared state over the fleet link (`/fleet/run/...`).

`POST /fleet/run/etcd/join` (add the asker's etcd member to the cluster: `FleetStore.join_asked`),
`POST /fleet/run/move/check`, `POST /fleet/run/move/in`, `POST /fleet/run/move/drop` (the target's
side of a move: `Mover`), `POST /fleet/run/move/out` (move a node this computer hosts, asked by
another computer's person: `{"node", "to"}`), `POST /fleet/run/replica` and
`/fleet/run/replica/drop` (a failover node's replica kept or dropped here), `POST
/fleet/run/failover/stop` (another computer takes a node over: the copy here stops). The link has already checked the asker's pinned key
and bounded the request; errors are `{"error": {"code", "message"}}` as everywhere.
"""

from __future__ import annotations

from cadre_desktop.errors import ApiError, CadreError, InputError, NoSuchThing
from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.host.fleet.link_api import answer, error_answer
from cadre_desktop.host.fleetrun.failover import Failover
from cadre_desktop.host.fleetrun.moves import Mover
from cadre_desktop.host.fleetrun.store import FleetStore
from cadre_desktop.wire.httpmsg import Answer, Request


def _status(exc: CadreError) -> int:
    if isinstance(exc, NoSuchThing):
        return 404
    return 409 if isinstance(exc, InputError) and exc.code == "conflict" else 400 if isinstance(exc, InputError) else 503


class RunApi:
    def __init__(self, store: FleetStore, mover: Mover, failover: Failover) -> None:
        self.store = store
        self.mover = mover
        self.failover = failover

    async def __call__(self, request: Request, asker: Computer) -> Answer:
        try:
            return await self._route(request, asker)
        except ApiError as exc:
            return error_answer(exc.status, exc.code, exc.message)
        except CadreError as exc:
            return error_answer(_status(exc), exc.code, exc.message)

    async def _route(self, request: Request, asker: Computer) -> Answer:
        if request.method != "POST":
            return error_answer(405, "method_not_allowed", "The fleet link does not take that here.")
        path = request.path
        if path == "/fleet/run/etcd/join":
            body = await request.json()
            return answer({"initial": await self.store.join_asked(asker, body.get("peer_url"))})
        if path == "/fleet/run/move/check":
            self.mover.check_in(await request.json())
            return answer({"ok": True})
        if path == "/fleet/run/move/in":
            return answer((await self.mover.move_in(asker, await request.json())).to_json())
        if path == "/fleet/run/move/drop":
            return answer({"dropped": await self.mover.drop(await request.json())})
        if path == "/fleet/run/move/out":
            body = await request.json()
            return answer(await self.mover.move(str(body.get("node", ""))[:64], str(body.get("to", ""))[:64]))
        if path == "/fleet/run/replica":
            return answer(await self.failover.replica_in(asker, await request.json()))
        if path == "/fleet/run/replica/drop":
            return answer(await self.failover.replica_drop(asker, await request.json()))
        if path == "/fleet/run/failover/stop":
            return answer(await self.failover.stop_asked(await request.json()))
        return error_answer(404, "not_found", "The fleet link has no such call.")
