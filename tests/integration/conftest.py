"""Fixtures for integration tests: real headless hosts on a real Secret Service; every driver under the driver contract."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from tests.support.driver_contract import RIGS
from tests.support.etcd_cluster import make_cluster, start_cluster
from tests.support.headless import HeadlessHost


@pytest.fixture
def host_factory(tmp_path, secret_service):
    hosts: list[HeadlessHost] = []

    def make(settings: dict | None = None, home=None) -> HeadlessHost:
        h = HeadlessHost(home or tmp_path / "home", secret_service, settings)
        hosts.append(h)
        return h

    yield make
    pids = []
    for h in hosts:
        if h.proc and h.proc.poll() is None:
            h.stop()
    for proc in psutil.process_iter(["environ"]):
        try:
            env = proc.info["environ"] or {}
        except psutil.Error:
            continue
        if env.get("CADRE_NODE_DIR", "").startswith(str(tmp_path)):
            pids.append(proc)
    for proc in pids:
        proc.kill()


@pytest.fixture(params=sorted(RIGS))
def contract_rig(request, tmp_path):
    """Each driver under the driver contract (tests/support/driver_contract.py), on a fresh home."""
    rig = RIGS[request.param](tmp_path / "home")
    yield rig
    rig.cleanup()


@pytest.fixture
def cleanup():
    """Pids a test started: their groups and themselves killed at its end, whatever it left."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
async def etcd_cluster(tmp_path):
    """A real 3-member etcd cluster on 127.0.0.1, TLS on, one computer's folder each (tests/support/etcd_cluster.py)."""
    cluster = make_cluster(tmp_path, 3)
    try:
        await start_cluster(cluster)
        yield cluster
    finally:
        await cluster.close()
