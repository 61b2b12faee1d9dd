"""Every node at once on the control API: Pause all and the run conditions.

Registered by `ControlServer` (behind its guards):

* `POST /api/host/pause` with `{}` (until a person resumes), `{"for_ms": N}` or
  `{"until": "<RFC 3339>"}`: every node is held (`held_by: person`), stopped cleanly, and
  started again when the pause ends; kept across a restart of the host. A time in the past
  is one 400 and changes nothing. The answer is the pause (`paused`, `since`, `until`,
  `left_ms`, `reason`), as `GET /api/host` carries it under `pause`.
* `POST /api/host/resume`: ends it (and a person's word overrides the run conditions until
  their next change); the answer is `{"paused": false}`.
* `GET /api/host/conditions`: each run condition, what it sees now, where from and what it
  does, and the verdict (`cadre-desktop conditions` prints it).
"""

from __future__ import annotations

from cadre_desktop.host.edges.control_body import pause_body, read_body
from cadre_desktop.host.edges.router import RouteDef, json_answer
from cadre_desktop.host.edges.served import ServedHost
from cadre_desktop.wire.httpmsg import Answer, Request


def routes(host: ServedHost) -> list[RouteDef]:
    """The routes, on the host the control API serves."""

    async def pause(request: Request) -> Answer:
        for_ms, until = await pause_body(request)
        return json_answer(await host.pause_all(for_ms=for_ms, until=until))

    async def resume(request: Request) -> Answer:
        await read_body(request, set())
        return json_answer(await host.resume_all())

    async def conditions(request: Request) -> Answer:
        return json_answer(host.conditions_report())

    return [("POST", "/api/host/pause", pause), ("POST", "/api/host/resume", resume),
            ("GET", "/api/host/conditions", conditions)]
