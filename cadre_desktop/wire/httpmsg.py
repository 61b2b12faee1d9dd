"""A request and its answer as the HTTP/1.1 server (`http1.py`) hands them over: no HTTP library.

The node's API (`node/api.py`) and the host's (`host/edges/`) are written against these, so
neither loads an HTTP framework: a :class:`Request` is what the server parsed (method,
decoded path, query, headers, peer address, a way to read the body under the server's
limits); an :class:`Answer` is a status, headers and a body, or a stream of chunks (the
control API's events).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from cadre_desktop.wire.api import parse_json_body


class Request:
    """One request as a server parsed it. ``read_body`` enforces the server's limits."""

    __slots__ = ("method", "path", "query_string", "headers", "remote", "_read_body", "_query", "match_info",
                 "secrets")

    def __init__(self, method: str, path: str, query_string: str, headers: Mapping[str, str],
                 remote: str | None, read_body: Callable[[], Awaitable[bytes]]) -> None:
        self.method = method
        self.path = path  # percent-decoded
        self.query_string = query_string
        self.headers = headers  # lower-case names, the first value of each
        self.remote = remote
        self._read_body = read_body
        self._query: dict[str, str] | None = None
        #: The parts of the path a route named (``{id}``), set by a router.
        self.match_info: dict[str, str] = {}
        #: Strings of this request a logged failure must not show (an invitation in its body).
        self.secrets: list[str] = []

    @property
    def query(self) -> dict[str, str]:
        """The first value of each name; parsed on first use."""
        if self._query is None:
            from urllib.parse import parse_qsl

            self._query = {}
            for name, value in parse_qsl(self.query_string, keep_blank_values=True):
                self._query.setdefault(name, value)
        return self._query

    async def body(self) -> bytes:
        """The whole body, decoded; an ApiError (400, 408, 413) when the server's limits refuse it."""
        return await self._read_body()

    async def json(self, *, optional: bool = False) -> dict[str, Any]:
        """The body as a JSON object (``{}`` for an empty optional one), else an ApiError."""
        return parse_json_body(await self._read_body(), optional=optional)

    def bearer(self) -> str | None:
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return (token.strip() or None) if scheme.lower() == "bearer" else None

    @property
    def client(self) -> str:
        return self.remote or "unknown"


class Answer:
    """A status, headers and a body; or, with ``stream``, a body sent chunk by chunk as it comes."""

    __slots__ = ("status", "headers", "body", "stream")

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes,
                 stream: AsyncIterator[bytes] | None = None) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.stream = stream
