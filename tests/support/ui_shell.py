"""The UI tests' rig: pytest-qt against a real in-process Host running real reference nodes.

The fixtures live here (tests/ui/conftest.py and the reliability suite's UI test
import them).

Qt runs offscreen. The Host runs on a qasync loop made with
`already_running=True`: asyncio callbacks are Qt timers and socket notifiers,
so they run whenever Qt processes events, which is exactly what
`qtbot.waitUntil` does while it polls. Coroutines are started with
`aio.run(...)`, which waits for them the same way; nothing sleeps.
The tests are plain functions, so pytest-asyncio leaves them alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import psutil  # noqa: E402
import pytest  # noqa: E402

from tests.support.headless import fast_settings  # noqa: E402

CRASHING_NODE = [sys.executable, "-c", "import sys; print('node exploded: bad config', flush=True); sys.exit(1)"]


def crashing_settings(**overrides) -> dict:
    """A node that exits at once. A respawn waiting out its backoff is picked up by the
    sweep, so a shorter sweep makes the give-up come sooner."""
    return fast_settings(node_command=CRASHING_NODE, sweep_ms=250, **overrides)


class Aio:
    """Run coroutines on the qasync loop from a synchronous test."""

    def __init__(self, loop, qtbot) -> None:
        self.loop, self.qtbot = loop, qtbot

    def run(self, coro, timeout: float = 20.0):
        task = asyncio.ensure_future(coro, loop=self.loop)
        self.qtbot.waitUntil(task.done, timeout=int(timeout * 1000))
        return task.result()

    def wait(self, predicate, timeout: float = 30.0):
        """Poll `predicate` while Qt and asyncio run; return its last (true) value. The deadline has
        room for real node programs starting on a machine another suite keeps busy."""
        seen: list[object] = []

        def check() -> bool:
            seen[:] = [predicate()]
            return bool(seen[0])
        self.qtbot.waitUntil(check, timeout=int(timeout * 1000))
        return seen[0]


@pytest.fixture(scope="session")
def qloop(qapp):
    """One qasync loop for the whole session, never stopped: stopping it calls
    QCoreApplication.exit(), after which every nested Qt event loop (the ones
    qtbot.wait runs) returns at once."""
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    # A plain pool, shut down below; qasync's own QThread pool is never closed here.
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-loop")
    loop.set_default_executor(executor)
    asyncio.events._set_running_loop(None)  # the constructor made it the running loop
    yield loop
    executor.shutdown(wait=True)


@pytest.fixture
def aio(qloop, qtbot):
    """The session loop, running for this test only: the tests after it (pytest-asyncio's
    included) must find no running loop."""
    asyncio.set_event_loop(qloop)
    asyncio.events._set_running_loop(qloop)
    try:
        yield Aio(qloop, qtbot)
        leftover = [t for t in asyncio.all_tasks(qloop) if not t.done()]
        for task in leftover:
            task.cancel()
        qtbot.waitUntil(lambda: all(t.done() for t in leftover), timeout=5000)
    finally:
        asyncio.events._set_running_loop(None)
        asyncio.set_event_loop(None)


@pytest.fixture
def keyring_env(secret_service, monkeypatch):
    for key, value in secret_service.items():
        monkeypatch.setenv(key, value)
    return secret_service


@pytest.fixture
def settings_doc(request):
    """Override per test with `@pytest.mark.parametrize('settings_doc', [...], indirect=True)`."""
    return getattr(request, "param", None) or fast_settings()


@pytest.fixture
def home(tmp_path, settings_doc, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(settings_doc))
    monkeypatch.setenv("CADRE_DESKTOP_HOME", str(home))
    yield home
    # Whatever a test left running under this home goes, whatever happened.
    for proc in psutil.process_iter(["environ"]):
        try:
            if (proc.info["environ"] or {}).get("CADRE_NODE_DIR", "").startswith(str(tmp_path)):
                proc.kill()
        except psutil.Error:
            continue


@pytest.fixture
def host(home, keyring_env, aio):
    import keyring.backends.SecretService

    from cadre_desktop.host.core.vault.secrets import SecretStore
    from cadre_desktop.host.host import Host
    from cadre_desktop.paths import resolve_paths
    from cadre_desktop.settings import load_settings

    paths = resolve_paths()
    host = Host(paths, load_settings(paths.settings_file),
                secrets=SecretStore(keyring.backends.SecretService.Keyring()), serve_control_api=False)
    aio.run(host.start())
    yield host
    if host._started:
        aio.run(host.stop())


class FakeAutostart:
    def __init__(self) -> None:
        self.on = False
        self.calls: list[str] = []

    def enable(self) -> str:
        self.calls.append("enable")
        self.on = True
        return "on"

    def disable(self) -> str:
        self.calls.append("disable")
        self.on = False
        return "off"

    def status(self) -> bool:
        return self.on


@pytest.fixture
def shell(host, qtbot, monkeypatch):
    from cadre_desktop.settings import load_settings
    from cadre_desktop.ui.shell import Shell

    shell = Shell(host, load_settings(host.paths.settings_file), autostart=FakeAutostart())
    yield shell
    if not shell.stopping:
        shell.close()
    from PySide6.QtWidgets import QApplication, QMessageBox

    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, QMessageBox):
            widget.close()


def give_up(shell, aio, name: str = "Garage") -> str:
    """Add a node through the UI (with a crashing node command) and wait until the host gives up on it."""
    shell.actions.add(name)
    node_id = aio.wait(lambda: next((v.id for v in shell.model.views() if v.name == name), None))
    aio.wait(lambda: shell.model.view(node_id).status == "error")
    return node_id
