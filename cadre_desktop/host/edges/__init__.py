"""The engine's HTTP edges: the loopback control API and the lend API, on the node's h11 server.

It holds the servers (``control``: the CLI's and scripts' API, token and SSE events;
``lend_api``: the one server a borrower on the LAN reaches, while a grant is active;
``lend_control``: the owner's grant routes; ``caps_control``, ``host_control`` and
``fleet_control`` (the fleet's routes, and node calls forwarded to another computer) beside
it, all reading requests through ``control_body``), each error's status (``http_status``),
the lend API's body reading and error shape (``lend_wire``, the wire format of
``cadre_desktop.wire``) and the routes of both (``router``). Both serve on
``cadre_desktop.wire.http1`` (h11, the node's server; its guard is ``netguard``): nothing
here imports aiohttp, so the tray never loads it for its servers. It may import the
basics, ``cadre_desktop.wire``, the core, lending and the fleet; never ``local``, the node, or the
front ends. Only this room serves HTTP, but for the fleet link's own server (``host/fleet/link.py``).
"""
