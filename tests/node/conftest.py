"""The node tests' fixtures: real node processes on 127.0.0.1 (tests/support/node_process.py).

Every node a test starts is stopped with SIGTERM at teardown and must exit 0, and its
logs must not contain any secret the test saw.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.node_process import NodeLauncher


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def nodes(tmp_path: Path, http: aiohttp.ClientSession) -> AsyncIterator[NodeLauncher]:
    launcher = NodeLauncher(tmp_path, http)
    try:
        yield launcher
    finally:
        await launcher.close()
