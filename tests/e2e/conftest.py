"""The end-to-end tests' fixtures: a desktop (Xvfb, a tray, dunst, a private D-Bus) per test."""

import pytest

from tests.support.e2e.desktop import start_desktop


@pytest.fixture
def desktop(tmp_path, secret_service):
    desktop = start_desktop(tmp_path, secret_service)
    yield desktop
    desktop.stop()
