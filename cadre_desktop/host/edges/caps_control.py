"""A node's caps on the control API: `PATCH /api/nodes/{id}`.

Registered by `ControlServer` (behind its guards). The body holds any of
`cpu_percent` (percent of one core, 1 to 100 × cores, or null for the host's
`node_cpu_percent`), `memory_mb` (at least 32, or null for `node_memory_mb`) and
`always_run` (true or false). The whole body is checked before anything is
written: a bad value is one 400 naming it, and nothing changes. The answer is the
node's view, whose `caps` hold what its next start gets and how this computer
enforces it; a running node takes the change when it starts again (a Restart).
"""

from __future__ import annotations

from cadre_desktop.host.core.ops.caps import CAPS_FIELDS, check_caps_change
from cadre_desktop.host.edges.control_body import node_id_of, read_body
from cadre_desktop.host.edges.router import RouteDef, json_answer
from cadre_desktop.host.edges.served import ServedHost
from cadre_desktop.wire.httpmsg import Answer, Request


def routes(host: ServedHost) -> list[RouteDef]:
    """The route, on the host the control API serves."""

    async def set_caps(request: Request) -> Answer:
        node_id = node_id_of(request)
        change = check_caps_change(await read_body(request, set(CAPS_FIELDS)))
        view = await host.set_node_caps(node_id, change)
        return json_answer(view.to_json())

    return [("PATCH", "/api/nodes/{id}", set_caps)]
