"""Join with invitation: the dialog, a real invitation from a claimed node, and a bad one."""

from __future__ import annotations

import json
import urllib.request

from PySide6.QtWidgets import QApplication, QDialogButtonBox, QMessageBox

from cadre_desktop.ui.prefs.dialogs import JoinDialog
from tests.support.claim_link import claim


def invitation_from(view, owner_token: str) -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{view.api_port}/invitations", data=b"{}", method="POST",
                                 headers={"Authorization": f"Bearer {owner_token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["invitation"]


def join_dialog(shell) -> JoinDialog:
    shell.ask_join()
    return next(w for w in QApplication.topLevelWidgets() if isinstance(w, JoinDialog) and w.isVisible())


def test_a_node_joins_with_an_invitation_typed_into_the_dialog(shell, aio):
    shown = []
    shell.notifier.shown.connect(lambda *args: shown.append(args))
    shell.actions.add("Kitchen")
    first = aio.wait(lambda: next((v for v in shell.model.views() if v.ready), None))
    status, body = claim(first.claim_url, "family")
    assert status == 200
    aio.wait(lambda: shell.model.view(first.id).status == "joined")

    dialog = join_dialog(shell)
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert not ok.isEnabled()  # nothing pasted yet
    dialog.invitation.setPlainText(invitation_from(first, body["owner_token"]))
    dialog.name.setText("Study")
    ok.click()
    second = aio.wait(lambda: next((v for v in shell.model.views() if v.name == "Study"), None))
    assert second.mode == "invitation" and second.claim_url is None
    aio.wait(lambda: shell.model.view(second.id).status == "joined")
    assert shell.model.view(second.id).cadre == "family"
    aio.wait(lambda: len(shown) == 2)
    assert shown[1][:2] == (second.id, "Study joined its cadre")
    assert second.id not in shell.qr_dialogs  # nothing to claim


def test_a_malformed_invitation_is_refused_in_words(shell, aio):
    dialog = join_dialog(shell)
    dialog.invitation.setPlainText("not an invitation")
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    box = aio.wait(lambda: next((w for w in QApplication.topLevelWidgets()
                                 if isinstance(w, QMessageBox) and w.isVisible()), None))
    assert box.text() == "Could not join with the invitation."
    assert "does not look like an invitation" in box.informativeText()
    assert shell.model.rowCount() == 0


def test_a_joined_node_adds_another_to_its_cadre_from_the_window_with_no_token(shell, aio, monkeypatch):
    from PySide6.QtWidgets import QInputDialog

    shell.actions.add("Kitchen")
    first = aio.wait(lambda: next((v for v in shell.model.views() if v.ready), None))
    window = shell.window
    window.present()
    assert window.select(first.id)
    assert not window.invite_button.isEnabled()  # not in a cadre yet
    assert claim(first.claim_url, "family")[0] == 200
    aio.wait(lambda: shell.model.view(first.id).status == "joined")
    window.update_buttons()
    assert window.invite_button.isEnabled()
    assert window.invite_button.text().replace("&", "") == 'Add another node to "family"…'
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("Garage", True))
    window.invite_button.click()
    second = aio.wait(lambda: next((v for v in shell.model.views() if v.name == "Garage"), None))
    assert second.mode == "invitation"
    aio.wait(lambda: shell.model.view(second.id).status == "joined", timeout=30)
    assert shell.model.view(second.id).cadre == "family"
