"""The routes of the host's HTTP APIs: a method and a path pattern to a handler, and JSON answers.

A pattern names the parts of a path it takes in braces (``/api/nodes/{id}``; a part is
one path segment, never empty, as aiohttp's were). Routes are tried in the order they were
added: the first whose pattern and method match answers, so a fixed path registered before
a pattern (``/api/nodes/join`` before ``/api/nodes/{id}``) wins. A path some route matches
with another method is a 405 (with the methods it takes); no match at all is a 404. A GET
route answers HEAD too. The API turns either into its own error body.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping

from cadre_desktop.wire.httpmsg import Answer, Request

Handler = Callable[[Request], Awaitable[Answer]]
#: One route: its method, its pattern, its handler.
RouteDef = tuple[str, str, Handler]
JSON_TYPE = "application/json; charset=utf-8"


def json_answer(doc: object, status: int = 200, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, [("Content-Type", JSON_TYPE), *(headers or {}).items()], json.dumps(doc).encode())


class Router:
    def __init__(self, routes: list[RouteDef] | None = None) -> None:
        self._routes: list[tuple[str, tuple[str, ...], Handler]] = []
        for method, pattern, handler in routes or []:
            self.add(method, pattern, handler)

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        if not pattern.startswith("/"):
            raise ValueError(f"a route's pattern starts with '/': {pattern!r}")
        self._routes.append((method.upper(), tuple(pattern.split("/")[1:]), handler))

    def resolve(self, request: Request) -> tuple[Handler | None, list[str]]:
        """The handler for the request (its ``match_info`` set), else None and the methods the path
        takes (empty: no such path, a 404; else a 405)."""
        parts = request.path.split("/")[1:] if request.path.startswith("/") else None
        method = "GET" if request.method == "HEAD" else request.method
        allowed: set[str] = set()
        for route_method, pattern, handler in self._routes if parts is not None else ():
            params = _match(pattern, parts or [])
            if params is None:
                continue
            if route_method == method:
                request.match_info = params
                return handler, []
            allowed.add(route_method)
            if route_method == "GET":
                allowed.add("HEAD")
        return None, sorted(allowed)


def _match(pattern: tuple[str, ...], parts: list[str]) -> dict[str, str] | None:
    if len(pattern) != len(parts):
        return None
    params: dict[str, str] = {}
    for want, part in zip(pattern, parts, strict=True):
        if want.startswith("{") and want.endswith("}"):
            if not part:
                return None
            params[want[1:-1]] = part
        elif want != part:
            return None
    return params
