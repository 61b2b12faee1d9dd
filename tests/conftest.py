import pytest


@pytest.fixture(scope="session")
def secret_service():
    """Environment variables that point a subprocess at a real, unlocked Secret Service."""
    from tests.support.session_bus import SecretServiceSession

    session = SecretServiceSession()
    try:
        yield session.start()
    finally:
        session.stop()
