"""Fixtures of the reliability and security tests.

Randomness: every test that draws random numbers takes `rng`, seeded from
CADRE_TEST_SEED when set (to replay a failure) or else at random; the seed is
printed with every failure report.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from tests.support.headless import HeadlessHost
from tests.support.node_scan import kill_node_processes

REPO = Path(__file__).resolve().parents[2]
FLAKY_NODE = [sys.executable, str(REPO / "tests" / "support" / "flaky_node.py")]
SEED_KEY = pytest.StashKey[int]()


@pytest.fixture
def rng(request) -> random.Random:
    env = os.environ.get("CADRE_TEST_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(2**32)
    request.node.stash[SEED_KEY] = seed
    print(f"random seed: CADRE_TEST_SEED={seed}")
    return random.Random(seed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    seed = item.stash.get(SEED_KEY, None)
    if seed is not None and report.failed:
        report.sections.append(("random seed", f"replay with CADRE_TEST_SEED={seed}"))
    return report


def host_settings(rng: random.Random, **overrides) -> dict:
    """Quick supervision, loopback only, a port range of its own, the flaky node.

    Ports come from 61000-65499: above the kernel's usual ephemeral range and
    away from the 20000-32000 the other tests and the benchmarks draw from, so
    suites running side by side on one machine do not starve each other.
    """
    low = rng.randrange(61000, 65400, 100)
    settings = {
        "bind_host": "127.0.0.1",
        "advertise_host": "127.0.0.1",
        "port_range": [low, low + 99],
        "node_command": FLAKY_NODE,
        "respawn_backoff_base_ms": 50,
        "respawn_backoff_max_ms": 400,
        "respawn_max_attempts": 3,
        "sweep_ms": 500,
        "probe_interval_ms": 200,
        "stop_timeout_ms": 3000,
    }
    settings.update(overrides)
    return settings


@pytest.fixture
def hosts(tmp_path, secret_service):
    """Make headless hosts on the real Secret Service; stop them and every stray node at the end."""
    made: list[HeadlessHost] = []

    def make(settings: dict | None = None, home: Path | None = None, keyring_env: dict | None = None,
             kind: type[HeadlessHost] = HeadlessHost) -> HeadlessHost:
        host = kind(home or tmp_path / "home", secret_service if keyring_env is None else keyring_env, settings)
        made.append(host)
        return host

    yield make
    for host in made:
        if host.proc is not None and host.proc.poll() is None:
            try:
                host.stop()
            except Exception:
                host.proc.kill()
                host.proc.wait(10)
    for host in {h.home for h in made}:
        kill_node_processes(host)
