"""Throttling of wrong secrets, per client address.

A claim secret is long enough that guessing it is hopeless, but a node must not be
an oracle one can hammer either: after ``max_failures`` wrong secrets within
``lockout_s`` from one address, every attempt from that address is refused (429)
without being checked, until ``lockout_s`` has passed since the lock began. Not even
a right secret gets through a lock; otherwise the lock would not slow a guesser.

Memory is bounded: at most ``max_clients`` addresses are tracked, the stalest are
forgotten first.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    """The one reading a limiter needs: monotonic seconds (the node's and the host's clocks both give it)."""

    def monotonic(self) -> float: ...


@dataclass
class _Record:
    failures: list[float] = field(default_factory=list)  # monotonic times
    locked_until: float | None = None


class FailureLimiter:
    def __init__(
        self,
        clock: Clock,
        *,
        max_failures: int = 5,
        lockout_s: float = 60.0,
        max_clients: int = 4096,
    ) -> None:
        self._clock = clock
        self.max_failures = max_failures
        self.lockout_s = lockout_s
        self._max_clients = max_clients
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until ``client`` may try again, or ``None`` if it may now."""
        record = self._records.get(client)
        if record is None or record.locked_until is None:
            return None
        remaining = record.locked_until - self._clock.monotonic()
        if remaining <= 0:
            del self._records[client]
            return None
        return max(1, math.ceil(remaining))

    def failed(self, client: str) -> None:
        """Count a wrong secret from ``client``; may start its lock."""
        now = self._clock.monotonic()
        record = self._records.pop(client, None) or _Record()
        self._records[client] = record  # most recently seen goes last
        record.failures = [t for t in record.failures if now - t < self.lockout_s]
        record.failures.append(now)
        if len(record.failures) >= self.max_failures:
            record.locked_until = now + self.lockout_s
            record.failures.clear()
        while len(self._records) > self._max_clients:
            self._records.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._records.pop(client, None)
