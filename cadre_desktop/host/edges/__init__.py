"""The engine's HTTP edges: the loopback control API and the lend API, on aiohttp.

It holds the servers (``control``: the CLI's and scripts' API, token and SSE events;
``lend_api``: the one server a borrower on the LAN reaches, while a grant is active;
``lend_control``: the owner's grant routes), each error's status (``http_status``),
the lend API's body reading and error shape (``lend_wire``, the wire format of
``cadre_desktop.wire`` on aiohttp) and every connection's guard (``webguard``). It may
import the basics, ``cadre_desktop.wire``, the core and lending; never ``local``, the
node, or the front ends. Only this room serves HTTP.
"""
