"""The one HTTP request a node makes of another: a JSON POST (redeeming an invitation).

h11 over an asyncio connection, like the node's server (:mod:`http1`), so a
joining node never loads aiohttp's client for one request. The other node is
anyone on the network: its answer is bounded (head and body) and anything that
is not HTTP is a :class:`ClientError`. The caller bounds the time.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11

from cadre_desktop.errors import NodeFault
from cadre_desktop.text import url_host

MAX_HEAD = 8192
MAX_BODY = 64 * 1024


class ClientError(NodeFault):
    """The other side answered something that is not a bounded HTTP/1.1 answer."""

    code = "bad_answer"


async def post_json(host: str, port: int, path: str, doc: Any) -> tuple[int, dict[str, str], bytes]:
    """POST ``doc`` as JSON; returns (status, headers with lower-case names, body)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        body = json.dumps(doc).encode()
        headers = [("Host", f"{url_host(host)}:{port}"), ("Content-Type", "application/json"),
                   ("Content-Length", str(len(body))), ("Connection", "close")]
        writer.write(conn.send(h11.Request(method="POST", target=path, headers=headers))
                     + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
        await writer.drain()
        return await _answer(conn, reader)
    except h11.RemoteProtocolError as err:
        raise ClientError(f"not an HTTP answer: {err}") from None
    finally:
        writer.close()


async def _answer(conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    response: h11.Response | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(16384))
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise ClientError(f"an answer over {MAX_BODY} bytes")
        elif isinstance(event, h11.EndOfMessage) and response is not None:
            headers: dict[str, str] = {}
            for name, value in response.headers:
                headers.setdefault(name.decode("ascii"), value.decode("latin-1"))
            return response.status_code, headers, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            raise ClientError("the connection closed before an answer")
        # an InformationalResponse (100 Continue): the answer follows
