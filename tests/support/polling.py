"""Wait for a condition with a deadline, never a bare sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar, cast

T = TypeVar("T")


def wait_until(predicate: Callable[[], T | None | Literal[False]], timeout: float = 10.0, interval: float = 0.01,
               what: str = "condition") -> T:
    """The predicate's first true value (so never its None or False)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], T | Awaitable[T]], timeout: float = 10.0, interval: float = 0.01, what: str = "condition"
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        value: T = await got if asyncio.iscoroutine(got) else cast(T, got)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
