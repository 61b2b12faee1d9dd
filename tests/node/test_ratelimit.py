"""FailureLimiter, on a fake clock: exact lockout boundaries, no sleeping."""

from __future__ import annotations

from cadre_desktop.wire.ratelimit import FailureLimiter
from tests.support.clock import FakeClock


def test_locks_after_max_failures_and_reports_retry_after() -> None:
    clock = FakeClock()
    limiter = FailureLimiter(clock, max_failures=3, lockout_s=60)
    for _ in range(2):
        limiter.failed("a")
        assert limiter.retry_after("a") is None
    limiter.failed("a")
    assert limiter.retry_after("a") == 60
    clock.advance(59.5)
    assert limiter.retry_after("a") == 1
    clock.advance(0.5)
    assert limiter.retry_after("a") is None


def test_old_failures_fall_out_of_the_window() -> None:
    clock = FakeClock()
    limiter = FailureLimiter(clock, max_failures=3, lockout_s=10)
    limiter.failed("a")
    limiter.failed("a")
    clock.advance(10)
    limiter.failed("a")
    assert limiter.retry_after("a") is None


def test_clients_are_counted_apart_and_success_resets() -> None:
    clock = FakeClock()
    limiter = FailureLimiter(clock, max_failures=2, lockout_s=10)
    limiter.failed("a")
    limiter.failed("b")
    limiter.succeeded("a")
    limiter.failed("a")
    assert limiter.retry_after("a") is None
    limiter.failed("b")
    assert limiter.retry_after("b") == 10


def test_memory_is_bounded_by_forgetting_the_stalest_client() -> None:
    limiter = FailureLimiter(FakeClock(), max_failures=1, lockout_s=10, max_clients=3)
    for client in "abcd":
        limiter.failed(client)
    assert limiter.retry_after("a") is None
    assert all(limiter.retry_after(c) == 10 for c in "bcd")
