"""The one HTTP request a node makes of another: a JSON POST (redeeming an invitation).

It goes through the package's small h11 client (:mod:`cadre_desktop.net.httpclient`, the
host's too), so a joining node never loads aiohttp's client for one request. The other
node is anyone on the network: its answer is bounded (head and body) and anything that
is not HTTP is a :class:`ClientError`. The caller bounds the time.
"""

from __future__ import annotations

import json
from typing import Any

from cadre_desktop.net.httpclient import MAX_BODY, MAX_HEAD, ClientError, request

__all__ = ["MAX_BODY", "MAX_HEAD", "ClientError", "post_json"]


async def post_json(host: str, port: int, path: str, doc: Any) -> tuple[int, dict[str, str], bytes]:
    """POST ``doc`` as JSON; returns (status, headers with lower-case names, body)."""
    answer = await request(host, port, "POST", path, headers=[("Content-Type", "application/json")],
                           body=json.dumps(doc).encode())
    return answer.status, answer.headers, answer.body
