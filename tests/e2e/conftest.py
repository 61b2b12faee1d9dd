"""The desktop every end-to-end test runs on."""

from __future__ import annotations

import pytest

from tests.e2e.desktop import Desktop, missing_tools


@pytest.fixture
def desktop(tmp_path):
    if missing_tools():
        pytest.fail(f"missing {', '.join(missing_tools())}: ./scripts/test installs them")
    desktop = Desktop(tmp_path).start()
    yield desktop
    desktop.stop()
