import sys

import pytest


@pytest.fixture(scope="session")
def secret_service():
    """Environment variables that point a subprocess at a real, unlocked keyring.

    On Linux a private Secret Service (gnome-keyring on its own D-Bus session);
    on macOS and Windows (the release pipeline's test jobs) the system's own
    keyring, which keyring finds by itself: no variables needed.
    """
    if not sys.platform.startswith("linux"):
        yield {}
        return
    from tests.support.session_bus import SecretServiceSession

    session = SecretServiceSession()
    try:
        yield session.start()
    finally:
        session.stop()
