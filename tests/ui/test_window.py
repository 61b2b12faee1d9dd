"""The node window: an empty state, buttons that apply, Remove that asks first, a following log."""

from __future__ import annotations

import pytest

from tests.ui.conftest import crashing_settings
from tests.ui.support import claim


def enabled(window) -> set[str]:
    buttons = {"qr": window.qr_button, "retry": window.retry_button, "restart": window.restart_button,
               "remove": window.remove_button, "log": window.log_button, "copy": window.copy_button}
    return {name for name, button in buttons.items() if button.isEnabled()}


def added(shell, aio, name="Kitchen"):
    shell.actions.add(name)
    return aio.wait(lambda: next((v for v in shell.model.views() if v.name == name and v.ready), None))


def test_empty_state_explains_what_to_do_first(shell):
    window = shell.window
    assert window.pages.currentWidget() is window.empty_page
    assert "Add node" in window.empty_page.text() and "invitation" in window.empty_page.text()
    assert window.add_button.isEnabled() and window.join_button.isEnabled()
    assert enabled(window) == set()


def test_buttons_follow_the_selected_nodes_state(shell, aio, qtbot):
    window = shell.window
    view = added(shell, aio)
    assert window.pages.currentWidget() is window.table_page
    assert window.selected_id() == view.id  # the first row is selected for you
    assert enabled(window) == {"qr", "restart", "remove", "log", "copy"}

    assert claim(view.claim_url, "family")[0] == 200
    aio.wait(lambda: shell.model.view(view.id).status == "joined")
    assert enabled(window) == {"restart", "remove", "log"}

    window.restart_button.click()  # busy while it runs: nothing else may start
    assert enabled(window) == {"log"}
    aio.wait(lambda: not shell.actions.busy(view.id))
    assert enabled(window) == {"restart", "remove", "log"}


@pytest.mark.parametrize("settings_doc", [crashing_settings()], indirect=True)
def test_only_a_node_in_error_can_be_retried(shell, aio):
    window = shell.window
    shell.actions.add("Garage")
    node_id = aio.wait(lambda: shell.model.rowCount() and shell.model.views()[0].id)
    aio.wait(lambda: shell.model.view(node_id).status == "error")
    window.select(node_id)
    assert enabled(window) == {"retry", "remove", "log"}


def test_remove_asks_first_and_says_what_is_deleted(shell, aio, monkeypatch):
    from cadre_desktop.ui import dialogs

    window = shell.window
    view = added(shell, aio)
    asked = []
    monkeypatch.setattr(dialogs, "confirm", lambda *a, **k: asked.append((a, k)))
    window.remove_button.click()
    assert len(asked) == 1
    (parent, title, text, yes, then), options = asked[0]
    assert text == "Remove Kitchen?" and yes == "Remove"
    assert str(shell.host.paths.node_dir(view.id)) in options["detail"]
    assert "claim secret" in options["detail"] and "cannot be undone" in options["detail"]
    assert shell.model.view(view.id) is not None  # not answered yet: nothing removed

    then()
    aio.wait(lambda: shell.model.rowCount() == 0)
    aio.wait(lambda: not shell.actions.busy(view.id))
    assert not shell.host.paths.node_dir(view.id).exists()
    assert window.pages.currentWidget() is window.empty_page


def test_log_view_follows_the_selected_node(shell, aio, qtbot):
    window = shell.window
    window.show()
    qtbot.waitExposed(window)
    view = added(shell, aio)
    window.log_button.click()
    assert window.log.isVisible()
    aio.wait(lambda: "listening on" in window.log.toPlainText())
    assert claim(view.claim_url, "family")[0] == 200
    aio.wait(lambda: "claimed into cadre 'family'" in window.log.toPlainText(), timeout=5)
    assert view.claim_url.split("#")[1] not in window.log.toPlainText()


def test_an_action_that_fails_is_shown_in_words(shell, aio, qtbot):
    from PySide6.QtWidgets import QApplication, QMessageBox

    view = added(shell, aio)
    shell.actions.retry(view.id)  # not in error: the host refuses
    box = aio.wait(lambda: next((w for w in QApplication.topLevelWidgets()
                                 if isinstance(w, QMessageBox) and w.isVisible()), None))
    assert box.text() == "Could not retry Kitchen."
    assert "only a node in error can be retried" in box.informativeText()
    box.close()


def test_a_keyring_failure_is_shown_in_words_and_adds_nothing(shell, aio, monkeypatch):
    import keyring.backends.fail
    from PySide6.QtWidgets import QApplication, QMessageBox

    monkeypatch.setattr(shell.host.secrets, "_backend", keyring.backends.fail.Keyring())
    shell.ask_add()
    dialog = next(w for w in QApplication.topLevelWidgets() if w.windowTitle() == "Add node" and w.isVisible())
    dialog.accept()
    box = aio.wait(lambda: next((w for w in QApplication.topLevelWidgets()
                                 if isinstance(w, QMessageBox) and w.isVisible()), None))
    assert box.text() == "Could not add a node."
    assert "No usable keyring" in box.informativeText()
    assert shell.model.rowCount() == 0
