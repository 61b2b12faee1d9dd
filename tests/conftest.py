import asyncio
import sys
from pathlib import Path

# Imported before any test runs: otherwise hypothesis's pytest plugin first imports it in the
# run's summary, after the tests' threads, and CPython 3.11.7's ast.parse (pytest rewrites the
# module) then sometimes fails with "AST constructor recursion depth mismatch", so a green
# run of one file exited 1 (about one run in four of tests/unit/test_supervision_v2.py -k locked).
import hypothesis  # noqa: F401
import pytest

from tests.support import port_blocks
from tests.support.session_bus import running_secret_service, running_session

TESTS = Path(__file__).resolve().parent
#: Folders whose every test runs real hosts, desktops or bundles: all marked slow. Elsewhere a
#: test that takes more than about a second carries @pytest.mark.slow itself.
SLOW_FOLDERS = {"integration", "reliability", "e2e", "packaging"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            folder = item.path.relative_to(TESTS).parts[0]
        except ValueError:
            continue
        if folder in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _port_blocks():
    """The port ranges a test took (tests/support/port_blocks.py) are given back when it ends."""
    port_blocks.test_began()
    yield
    port_blocks.release()


@pytest.fixture(autouse=True)
def _no_subreaper_left():
    """A test whose host forked nodes made this process a subreaper (`forks.become_subreaper`):
    every orphan below it, of any later test (a killed host's nodes, a session's daemons),
    would be its child and a zombie nobody reaps. Undone when the test ends, and the zombies
    of orphans it got reaped."""
    yield
    from cadre_desktop.host.local.system import linux as forks

    if forks._subreaper:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(forks.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        forks._subreaper = None
        forks.reap([pid for pid, state in forks.child_states() if state == "Z"])


@pytest.fixture(scope="module")
def secret_service():
    """Environment variables that point a subprocess at a real, unlocked keyring.

    On Linux a private Secret Service (gnome-keyring on its own D-Bus session), one per test
    module (tests/support/session_bus.py says why not one per run); on macOS and Windows (the
    release pipeline's test jobs) the system's own keyring, which keyring finds by itself: no
    variables needed.
    """
    if not sys.platform.startswith("linux"):
        yield {}
        return
    with running_session() as session:
        yield session.env
        session.check_alive()


@pytest.fixture
async def serve_handler():
    """Serve one aiohttp handler on 127.0.0.1 (a stand-in node or inviter); returns its port."""
    from aiohttp import web

    runners = []

    async def serve(method: str, path: str, handler) -> int:
        app = web.Application()
        app.router.add_route(method, path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        server = site._server  # the port the OS picked is on the private server
        assert isinstance(server, asyncio.Server)
        return server.sockets[0].getsockname()[1]

    yield serve
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
def private_secret_service():
    """A Secret Service of the test's own, for tests that lock or break it (Linux only)."""
    with running_secret_service() as env:
        yield env


def pytest_unconfigure(config):
    """The tests' systemd user manager (tests/support/user_manager.py) stopped; where none could run,
    the run's last line says so."""
    from tests.support import user_manager

    user_manager.stop_session_manager()
    if user_manager.SKIPPED_WHY:
        reporter = config.pluginmanager.getplugin("terminalreporter")
        capture = config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture()
        line = f"systemd driver tests SKIPPED: {user_manager.SKIPPED_WHY}"
        if reporter is not None:
            reporter.write_line(line, yellow=True, bold=True)
        else:
            print(line)
