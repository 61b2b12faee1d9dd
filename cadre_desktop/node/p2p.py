"""The P2P port: held so the host's port accounting is honest.

The reference node has no peer-to-peer protocol yet. It binds the port the host
gave it, greets whoever connects with one line naming itself, and closes. A real
node program would speak its protocol here.
"""

from __future__ import annotations

import asyncio
import contextlib

from cadre_desktop.node.errors import BindError


async def start_p2p_listener(host: str, port: int, peer_id: str) -> asyncio.AbstractServer:
    greeting = f"cadre-node p2p v1 {peer_id}\n".encode()

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            writer.write(greeting)
            await writer.drain()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    try:
        return await asyncio.start_server(greet, host, port)
    except OSError as err:
        raise BindError(f"cannot listen on P2P port {host}:{port}: {err.strerror}") from None
