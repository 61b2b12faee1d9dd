"""A keyring failure in the tray app: told once, in words; nothing added; the running node carries on.

Runs on the UI tests' real in-process Host and Shell (offscreen Qt, qasync).
"""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from cadre_desktop.keyrings.keyring_calls import BackendCalls  # noqa: E402
from tests.support.keyrings import LockedKeyring  # noqa: E402
from tests.support.ui_shell import aio, home, host, keyring_env, qloop, settings_doc, shell  # noqa: E402,F401


def visible_boxes():
    from PySide6.QtWidgets import QApplication, QMessageBox

    return [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]


def test_a_locked_keyring_is_told_once_adds_nothing_and_the_running_node_carries_on(shell, aio, monkeypatch):
    from cadre_desktop.ui import actions

    shell.actions.add("Kept")
    kept = aio.wait(lambda: shell.model.rowCount() and shell.model.views()[0])
    kept = aio.wait(lambda: (v := shell.model.view(kept.id)).ready and v)
    told, notified = [], []
    real_show_error = actions.show_error

    def show_error(*a, **k):
        told.append(a)
        return real_show_error(*a, **k)
    monkeypatch.setattr(actions, "show_error", show_error)
    shell.notifier.shown.connect(lambda *args: notified.append(args))
    monkeypatch.setattr(shell.host.secrets, "calls", BackendCalls(LockedKeyring()))

    shell.actions.add("Doomed")
    box = aio.wait(lambda: next(iter(visible_boxes()), None))
    aio.wait(lambda: not shell.actions.busy(""))
    # Let the engine run on for a while (a crash and a respawn of the kept node), so a
    # second message from a later event would show up.
    os.kill(kept.pid, signal.SIGKILL)
    aio.wait(lambda: (v := shell.model.view(kept.id)).ready and v.pid != kept.pid, timeout=20)
    assert visible_boxes() == [box] and len(told) == 1
    assert box.text() == "Could not add a node."
    assert "The keyring is locked. Unlock it" in box.informativeText()
    assert notified == [], "a notification repeated what the message box said"
    assert [v.id for v in shell.model.views()] == [kept.id]
    assert [n.id for n in shell.host.list_nodes()] == [kept.id]
    box.close()
