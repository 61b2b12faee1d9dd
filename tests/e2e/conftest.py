"""The end-to-end tests' fixtures: a desktop (Xvfb, a tray, dunst, a private D-Bus) per test, and on
it the notification daemon and a watch of the calls made to it (a module may give its own `desktop`)."""

import pytest

from tests.support.e2e.bus import Dunst, Monitor
from tests.support.e2e.desktop import start_desktop


@pytest.fixture
def desktop(tmp_path, secret_service):
    desktop = start_desktop(tmp_path, secret_service)
    yield desktop
    desktop.stop()


@pytest.fixture
def dunst(desktop, tmp_path):
    dunst = Dunst(tmp_path, desktop.env())
    yield dunst
    dunst.stop()


@pytest.fixture
def monitor(desktop, tmp_path, dunst):
    """The session bus's calls to the notification service, its tail printed for a failing test."""
    monitor = Monitor(desktop.bus_env["DBUS_SESSION_BUS_ADDRESS"], tmp_path / "bus.log",
                      "type='method_call',interface='org.freedesktop.Notifications'")
    yield monitor
    print(monitor.text()[-4000:])
    monitor.stop()
