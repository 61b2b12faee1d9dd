"""The connection guard (`cadre_desktop/netguard.py`) on an aiohttp server: the control API's
and the lend API's.

Three pieces: a site whose connections pass the guard before aiohttp sees them
(`GuardedSockSite`, loopback), the same accepting fairly by source address
(`FairSockSite`, for a server the LAN reaches: `netguard.bind_fair` and
`FairAcceptor`), and a middleware that marks a connection busy while its
handler runs. Put the middleware first, so a handler is busy before its first await.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from cadre_desktop.netguard import ACCEPT_BATCH, ConnectionGuard, FairAcceptor, reset


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


class _Listening:
    """What aiohttp reads of a site's server (its sockets) and calls on it (close)."""

    def __init__(self, acceptor: FairAcceptor) -> None:
        self.acceptor = acceptor
        self.sockets = list(acceptor.socks)

    def close(self) -> None:
        self.acceptor.stop()


class FairSockSite(web.BaseSite):
    """An aiohttp site on `netguard.bind_fair`'s sockets: accepted fairly by address, then guarded."""

    def __init__(self, runner: web.BaseRunner, socks: list[socket.socket], guard: ConnectionGuard) -> None:
        super().__init__(runner)
        self._socks = socks
        self._guard = guard
        self._opening: set[asyncio.Task[Any]] = set()

    @property
    def name(self) -> str:
        host, port = self._socks[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        acceptor = FairAcceptor(self._socks, self._guard, self._accepted)
        acceptor.start()
        self._server = _Listening(acceptor)  # type: ignore[assignment]

    def _accepted(self, sock: socket.socket) -> None:
        server = self._runner.server
        if server is None:
            reset(sock)
            return
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._connect(loop, sock, self._guard.protocol_factory(server)))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    @staticmethod
    async def _connect(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                       factory: Callable[[], asyncio.Protocol]) -> None:
        try:
            await loop.connect_accepted_socket(factory, sock)
        except OSError:
            sock.close()  # gone before its transport was made

    async def stop(self) -> None:
        self._guard.close()
        await super().stop()
