"""Fixtures of the reliability and security tests.

Randomness: every test that draws random numbers takes `rng`, seeded from
CADRE_TEST_SEED when set (to replay a failure) or else at random; the seed is
printed with every failure report.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.support.headless import HeadlessHost
from tests.support.node_scan import kill_node_processes

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
    for home in {h.home for h in made}:
        kill_node_processes(home)
