"""The node's HTTP server: the shared h11 server (`wire/http1.py`) with the node's logs.

Its access log leaves out a good answer to the host's probe (:func:`quiet`); every
other request is one line in the node's log.
"""

from __future__ import annotations

import logging

from cadre_desktop.net.netguard import ConnectionGuard
from cadre_desktop.wire.http1 import Handler, HttpServer
from cadre_desktop.wire.httpmsg import Request

log = logging.getLogger("cadre.node.http")
access_log = logging.getLogger("cadre.node.access")


def quiet(method: str, path: str, status: int) -> bool:
    """A request the access log leaves out: a good answer to `GET /status` (or `HEAD`).

    The host's probe asks it of every node every few seconds; a line each filled a
    node's log (and its cap) with nothing anyone reads, and pushed out the lines that
    matter. Every other request, and any /status that fails, is still logged.
    """
    return method in ("GET", "HEAD") and path == "/status" and 200 <= status < 300


def access(request: Request, target: str, status: int, took_s: float) -> None:
    if not quiet(request.method, request.path, status):
        access_log.info('%s "%s %s" %s %.1fms', request.remote, request.method, target, status, took_s * 1000)


def node_server(handler: Handler, guard: ConnectionGuard, *, max_body: int, body_timeout_s: float) -> HttpServer:
    """The node API's server: its bounds, its log, its access log."""
    return HttpServer(handler, guard, max_body=max_body, body_timeout_s=body_timeout_s, log=log, access=access)
