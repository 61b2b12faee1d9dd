"""The fleet link's server: TLS 1.3 with mutual authentication by pinned keys, on `bind_host:fleet_port`.

Every connection is refused before a byte of a request is read unless its TLS handshake passes:
TLS 1.3 only (a plain-HTTP client, an older TLS: refused), and a client certificate, when shown,
must be one this computer pinned (an unpaired or removed computer's is refused by OpenSSL, and its
fingerprint checked again against `fleet.json` after the handshake). A client that shows none may
only pair, and only while a code is open (`pairing.py`); otherwise it is closed at once. Each
refusal is one log line naming the address and the reason, never a code or a key.

A pinned computer's connection is served by the HTTP/1.1 server every API uses (`wire/http1.py`:
the head, body and time bounded, connections guarded), its handler knowing who asks (`ASKER`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from cadre_desktop.host.fleet.computers import Computer
from cadre_desktop.net.netguard import ConnectionGuard, bind_socket
from cadre_desktop.wire.http1 import HttpServer
from cadre_desktop.wire.httpmsg import Answer, Request

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

HANDSHAKE_S = 10.0
FRAME_S = 30.0
MAX_FRAME = 64 * 1024
MAX_HANDSHAKES = 64
IDLE_S = 60.0  # a peer's kept connection (its reachability checks) outlives several checks
MAX_BODY = 64 * 1024
#: The computer a request of the link comes from (set for the task that serves its connection).
ASKER: contextvars.ContextVar[Computer] = contextvars.ContextVar("fleet_asker")


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    """One frame of the pairing exchange: a 4-byte length and a JSON object, bounded in size and time."""
    async with asyncio.timeout(FRAME_S):
        size = int.from_bytes(await reader.readexactly(4), "big")
        if size > MAX_FRAME:
            raise ValueError("a pairing frame over its bound")
        doc = json.loads(await reader.readexactly(size))
    if not isinstance(doc, dict):
        raise ValueError("a pairing frame that is not an object")
    return doc


async def write_frame(writer: asyncio.StreamWriter, doc: dict[str, Any]) -> None:
    data = json.dumps(doc).encode()
    writer.write(len(data).to_bytes(4, "big") + data)
    async with asyncio.timeout(FRAME_S):
        await writer.drain()


Pairer = Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[None]]


class LinkServer:
    """Accepts, shakes hands, then serves a pinned computer's requests or one pairing try."""

    def __init__(self, *, context: Callable[[], ssl.SSLContext], pinned: Callable[[str], Computer | None],
                 handler: Callable[[Request], Awaitable[Answer]], pair: Pairer, can_pair: Callable[[], bool]) -> None:
        self._context = context
        self._pinned = pinned
        self._pair = pair
        self._can_pair = can_pair
        self.guard = ConnectionGuard(per_source=16, total=64, idle_s=IDLE_S, name="fleet link")
        self._http = HttpServer(handler, self.guard, max_body=MAX_BODY, body_timeout_s=10.0, log=log,
                                label="fleet link: ")
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Refusals so far, by reason (tests and doctor read it).
        self.refusals: dict[str, int] = {}

    async def start(self, host: str, port: int) -> None:
        sock = bind_socket(host, port, reuse=True)
        self._server = await asyncio.start_server(self._accepted, sock=sock)
        log.info("fleet link listening on %s:%d", host, port)

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._http.stop(1.0)

    def _refuse(self, where: str, reason: str) -> None:
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        log.warning("fleet link: refused a connection from %s: %s", where, reason)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        if len(self._tasks) >= MAX_HANDSHAKES:
            self._refuse(where, "too many connections at once")
            writer.transport.abort()
            return
        self._tasks.add(task)
        try:
            await self._serve(reader, writer, where)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            writer.transport.abort()
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str) -> None:
        import ssl

        try:
            async with asyncio.timeout(HANDSHAKE_S):
                await writer.start_tls(self._context())
        except ssl.SSLError as exc:
            self._refuse(where, _handshake_words(exc))
            writer.transport.abort()
            return
        except TimeoutError:
            self._refuse(where, "no TLS handshake in time")
            writer.transport.abort()
            return
        tls = writer.get_extra_info("ssl_object")
        der = tls.getpeercert(binary_form=True) if tls is not None else None
        if der is None:
            if not self._can_pair():
                self._refuse(where, "no pinned key shown, and no pairing code is open")
                writer.transport.abort()
                return
            await self._pair(reader, writer, where)
            return
        computer = self._pinned("sha256:" + hashlib.sha256(der).hexdigest())
        if computer is None:
            self._refuse(where, "a key this computer does not pin (unpaired or removed)")
            writer.transport.abort()
            return
        ASKER.set(computer)
        await self._http.serve_connection(reader, writer)


def _handshake_words(exc: BaseException) -> str:
    reason = (getattr(exc, "reason", None) or "").upper()
    if reason in ("HTTP_REQUEST", "WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "UNSUPPORTED_PROTOCOL"):
        return "not a TLS 1.3 handshake (plain HTTP, or an older TLS)"
    if "CERTIFICATE" in reason:
        return "a key this computer does not pin (unpaired or removed)"
    return f"TLS handshake failed ({reason.lower() or type(exc).__name__})"
