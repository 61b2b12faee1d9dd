"""What the systemd driver is handed, as the types it needs (`host/drivers.py` hands them over).

The driver shares two things with the local one: the port allocator (the range the nodes
may listen on) and the node logs (`logs/node-<id>.log` under one cap). It imports
neither: they come in as constructor parameters of these shapes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol


class Ports(Protocol):
    low: int
    high: int

    def allocate(self, count: int = 2, avoid: Iterable[int] = ()) -> list[int]: ...

    def try_reserve(self, ports: Iterable[int]) -> bool: ...

    def reserve(self, ports: Iterable[int]) -> None: ...

    def release(self, ports: Iterable[int]) -> None: ...


class LogBook(Protocol):
    def path(self, node_id: str) -> Path: ...

    def tail(self, node_id: str, lines: int, max_bytes: int) -> list[str]: ...

    def note(self, node_id: str, text: str) -> None: ...

    def trim(self, node_id: str) -> None: ...

    def delete(self, node_id: str) -> None: ...
