"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from tests.support.rig import Rig


@pytest.fixture
async def rig(tmp_path):
    """The engine's parts over a fake driver and a fake clock (tests/support/rig.py), closed after
    the test. A module with a rig of its own shape (holds, lending, the probe) defines its own."""
    r = Rig(tmp_path)
    yield r
    await r.close()
