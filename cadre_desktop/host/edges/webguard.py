"""The connection guard (`cadre_desktop/netguard.py`) on an aiohttp server: the control API's.

Two pieces: a site whose connections pass the guard before aiohttp sees them,
and a middleware that marks a connection busy while its handler runs. Put the
middleware first, so a handler is busy before its first await.
"""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from cadre_desktop.netguard import ACCEPT_BATCH, ConnectionGuard


def busy_middleware(guard: ConnectionGuard) -> Middleware:
    @web.middleware
    async def busy(request: web.Request, handler: Handler) -> web.StreamResponse:
        conn = guard.find(request.transport)
        if conn is None:
            return await handler(request)
        guard.begin(conn)
        try:
            return await handler(request)
        finally:
            guard.done(conn)

    return busy


class GuardedSockSite(web.SockSite):
    """An aiohttp site on a bound socket whose connections pass through a guard."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, guard: ConnectionGuard) -> None:
        super().__init__(runner, sock, backlog=ACCEPT_BATCH)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        server = self._runner.server
        if server is None:
            raise RuntimeError("the site's runner was not set up")
        self._server = await loop.create_server(
            self._guard.protocol_factory(server), sock=self._sock, backlog=self._backlog,
        )

    async def stop(self) -> None:
        self._guard.close()
        await super().stop()
