"""The Lent view and the grant dialog, over a real in-process Host lending real reference nodes."""

from __future__ import annotations

import os
import signal
import socket
import sys

import psutil
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from PySide6.QtGui import QGuiApplication

from cadre_desktop.host.lending.donations import DonationRequest
from cadre_desktop.host.lending.service import LendRefused
from cadre_desktop.ui.tray.status import TrayState
from cadre_desktop.wire.keys import b64url
from cadre_desktop.wire.seed import sign_seed
from tests.support.borrower import free_lend_port
from tests.support.claim_link import read_qr
from tests.support.headless import FLAKY_NODE, fast_settings

OWNER = Ed25519PrivateKey.generate()
LENDING = [fast_settings(lend_port=free_lend_port(), node_command=FLAKY_NODE)]


def lent_rows(shell) -> list[list[str]]:
    tree = shell.lent.view.tree
    rows = []
    for i in range(tree.topLevelItemCount()):
        item = tree.topLevelItem(i)
        rows.append([item.text(c) for c in range(tree.columnCount())])
        rows += [[item.child(j).text(c) for c in range(tree.columnCount())] for j in range(item.childCount())]
    return rows


def enabled(view) -> set[str]:
    buttons = {"copy": view.copy_button, "qr": view.qr_button, "revoke": view.revoke_button,
               "end": view.end_button, "retry": view.retry_button, "log": view.log_button}
    return {name for name, button in buttons.items() if button.isEnabled()}


def lend_one(shell, aio, party="friends", seed=True):
    """A grant, and a node lent under it as a borrower would ask for it (seeded, unless told not)."""
    lending = shell.host.lending
    grant = aio.run(lending.create_grant("Alice's cadre", 2))
    wanted = DonationRequest(party, "storage", (), (b64url(OWNER.public_key().public_bytes_raw()),))
    donation = aio.run(lending.service.request(grant, wanted))
    row = aio.wait(lambda: (d := lending.views.donation(donation.id)).status == "awaiting_seed" and d)
    if seed:
        made = sign_seed(OWNER.private_bytes_raw(), donation.id, party, row.peer_id).to_json()
        aio.run(lending.service.seed(grant, donation.id, made))
    return grant, donation.id


@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_the_lent_tab_explains_lending_while_nothing_is_lent(shell):
    tabs = shell.lent.tabs
    assert [tabs.tabText(i) for i in range(tabs.count())] == ["Nodes", "Lent"]
    assert "Lend nodes" in shell.lent.view.empty.text() and not shell.lent.view.empty.isHidden()
    assert enabled(shell.lent.view) == set()


@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_the_grant_dialog_makes_a_grant_whose_qr_code_is_its_link(shell, aio, qtbot, tmp_path):
    dialog = shell.lent.ask_lend()
    qtbot.waitExposed(dialog)
    dialog.label.setText("Alice's cadre")
    dialog.max_nodes.setValue(1)
    dialog.expiry.setCurrentIndex(2)  # in 7 days
    dialog.make_button.click()
    aio.wait(lambda: dialog.pages.currentWidget() is dialog.link_page)
    (grant,) = shell.host.lending.views.grants()
    link = aio.run(shell.host.lending.link_of(grant.id))
    assert dialog.link.text() == link and dialog.title.text() == "Alice's cadre"
    assert (grant.max_nodes, grant.status) == (1, "active") and grant.expires_at
    shot = tmp_path / "grant.png"
    assert dialog.grab().save(str(shot))
    assert read_qr(shot) == [link]
    dialog.copy.click()
    assert QGuiApplication.clipboard().text() == link
    aio.wait(lambda: lent_rows(shell) and lent_rows(shell)[0][:3] == ["Alice's cadre", "Active", "0 of 1"])
    dialog.close()


@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_a_lent_node_shows_its_party_and_status_and_counts_in_the_tray(shell, aio):
    grant, donation_id = lend_one(shell, aio, seed=False)
    aio.wait(lambda: any(r[1] == "Waiting for its seed" for r in lent_rows(shell)))
    assert shell.tray._state is TrayState.UNCLAIMED
    menu = [a.text() for a in shell.tray.menu.actions() if a.isVisible() and not a.isSeparator()]
    assert "Lent to other cadres: 1 node…" in menu and "Lend nodes…" in menu
    row = aio.wait(lambda: shell.host.lending.views.donation(donation_id))
    made = sign_seed(OWNER.private_bytes_raw(), donation_id, "friends", row.peer_id).to_json()
    aio.run(shell.host.lending.service.seed(shell.host.lending.grants.get(grant.id), donation_id, made))
    aio.wait(lambda: any(r[1] == "Seeded for friends" and r[4].startswith("cn1") for r in lent_rows(shell)))
    assert shell.tray._state is TrayState.JOINED
    shell.lent.show_lent()
    assert shell.window.isVisible() and shell.lent.tabs.currentWidget() is shell.lent.view
    view = shell.lent.view
    view.select("donation", donation_id)
    assert enabled(view) == {"end", "log"}
    view.log_button.setChecked(True)
    aio.wait(lambda: "seeded" in view.log.toPlainText())
    view.select("grant", grant.id)
    assert enabled(view) == {"copy", "qr", "revoke"}
    dialog = shell.lent.show_link(grant.id)
    aio.wait(lambda: dialog.pages.currentWidget() is dialog.link_page)
    assert dialog.link.text() == aio.run(shell.host.lending.link_of(grant.id))
    dialog.close()


@pytest.mark.slow
@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_end_loan_and_revoke_ask_first_then_leave_nothing(shell, aio, monkeypatch):
    from cadre_desktop.ui.prefs import dialogs

    asked = []
    monkeypatch.setattr(dialogs, "confirm", lambda parent, title, text, yes, then, **k: asked.append(k["detail"]))
    grant, donation_id = lend_one(shell, aio)
    view = shell.lent.view
    aio.wait(lambda: len(lent_rows(shell)) == 2)
    view.select("donation", donation_id)
    view.end_button.click()
    assert asked and "deleted" in asked[-1] and shell.host.lending.views.donations()  # not answered yet

    monkeypatch.setattr(dialogs, "confirm", lambda parent, title, text, yes, then, **k: then())
    view.end_button.click()
    aio.wait(lambda: len(lent_rows(shell)) == 1 and not shell.actions.busy(donation_id))
    assert not (shell.host.paths.node_dir(donation_id)).exists()
    _, second = lend_one(shell, aio)
    aio.wait(lambda: len(lent_rows(shell)) == 3)
    view.select("grant", (grant := shell.host.lending.views.grants()[-1]).id)
    view.revoke_button.click()
    aio.wait(lambda: shell.host.lending.views.grant(grant.id).status == "revoked")
    aio.wait(lambda: all(r[0] != f"friends ({second})" for r in lent_rows(shell)))
    assert shell.host.lending.views.donations() == []


@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_a_lent_node_given_up_on_is_told_like_a_hosted_one_and_retry_brings_it_back(shell, aio):
    shown = []
    shell.notifier.shown.connect(lambda node_id, title, body: shown.append((node_id, title, body)))
    _, donation_id = lend_one(shell, aio)
    running = aio.wait(lambda: (d := shell.host.lending.views.donation(donation_id)).running and d)
    (shell.host.paths.node_dir(donation_id) / "crash").touch()  # every start now exits 4: hopeless
    os.kill(running.pid, signal.SIGKILL)
    aio.wait(lambda: shell.host.lending.views.donation(donation_id).status == "error")
    aio.wait(lambda: shown)
    assert shown[0][0] == donation_id and shown[0][1] == "The node lent to friends stopped"
    assert shell.tray._state is TrayState.ERROR
    view = shell.lent.view
    view.select("donation", donation_id)
    assert enabled(view) == {"end", "retry", "log"}
    (shell.host.paths.node_dir(donation_id) / "crash").unlink()
    view.retry_button.click()
    back = aio.wait(lambda: (d := shell.host.lending.views.donation(donation_id)).running and d.status == "seeded"
                    and d)
    assert back.peer_id == running.peer_id and back.attempts == 1


def test_return_in_the_grant_form_makes_the_grant(qtbot):
    """Bug: the button box made Cancel the default, so Return in the form threw the grant away."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from cadre_desktop.ui.lending.grant_dialog import GrantDialog

    made = []
    dialog = GrantDialog(None, 10, lambda d, *fields: made.append(fields))
    qtbot.addWidget(dialog)
    dialog.open()
    qtbot.waitExposed(dialog)
    QTest.keyClicks(dialog.label, "Alice")
    QTest.keyClick(dialog.label, Qt.Key.Key_Return)
    assert made == [("Alice", 2, None)] and dialog.isVisible()
    assert not dialog.make_button.isEnabled()  # until the grant is made, or fails
    dialog.failed()
    assert dialog.make_button.isEnabled()


@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_a_grant_nobody_can_reach_says_so_in_the_lent_view(shell, aio):
    """The lend port taken: the grant is active, but its row says borrowers cannot reach it."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", LENDING[0]["lend_port"]))
    squatter.listen(1)
    try:
        aio.run(shell.host.lending.create_grant("Alice's cadre", 1))
        aio.wait(lambda: lent_rows(shell) and lent_rows(shell)[0][1] == "Active, unreachable")
        assert "cannot reach this host" in lent_rows(shell)[0][-1]
    finally:
        squatter.close()


@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_new_settings_reach_lent_nodes_and_lending(host, aio, tmp_path):
    """A new node program restarts lent nodes too; lend_max_nodes applies live; lend_port is at-start-only."""
    lending = host.lending
    grant = aio.run(lending.create_grant("Alice's cadre", 2))
    wanted = DonationRequest("friends", "storage", (), (b64url(OWNER.public_key().public_bytes_raw()),))
    donation = aio.run(lending.service.request(grant, wanted))
    before = aio.wait(lambda: (d := lending.views.donation(donation.id)).status == "awaiting_seed" and d)
    program = tmp_path / "new_node.py"
    program.write_text("import runpy\nrunpy.run_module('cadre_desktop.node', run_name='__main__', alter_sys=True)\n")
    new = host.settings.with_changes(node_command=[sys.executable, str(program)], lend_max_nodes=1,
                                     lend_port=host.settings.lend_port + 1)
    applied = aio.run(host.apply_settings(new))
    assert donation.id in applied.restarted and "lend_port" in applied.at_next_start
    after = aio.wait(lambda: (d := lending.views.donation(donation.id)).running and d.pid != before.pid and d)
    assert "new_node.py" in " ".join(psutil.Process(after.pid).cmdline()), "the lent node kept the old program"
    with pytest.raises(LendRefused) as refused:
        aio.run(lending.service.request(grant, wanted))
    assert refused.value.code == "host_full"
    link = aio.run(lending.link_of(grant.id))
    assert f":{LENDING[0]['lend_port']}/" in link, "the link names a port nothing listens on"


@pytest.mark.parametrize("settings_doc", LENDING, indirect=True)
def test_a_paused_lent_node_has_the_paused_dot_not_the_joined_green(shell, aio):
    """Regression (issue 39): a held node was drawn with a joined node's green dot (lent nodes too)."""
    from PySide6.QtCore import Qt

    from cadre_desktop.host.core.records.records import NodeStatus
    from cadre_desktop.ui.tray.status import HELD_COLOURS

    _grant, donation_id = lend_one(shell, aio)
    aio.wait(lambda: any(r[1].startswith("Seeded for") for r in lent_rows(shell)))
    aio.run(shell.host.lending.pause(donation_id))
    aio.wait(lambda: shell.host.lending.views.donation(donation_id).status == "paused")

    def dot() -> str:
        tree = shell.lent.view.tree
        for i in range(tree.topLevelItemCount()):
            grant = tree.topLevelItem(i)
            for j in range(grant.childCount()):
                child = grant.child(j)
                if child.data(0, Qt.ItemDataRole.UserRole) == ("donation", donation_id):
                    image = child.icon(1).pixmap(16, 16).toImage()
                    return image.pixelColor(8, 8).name()
        return ""

    aio.wait(lambda: dot() == HELD_COLOURS[NodeStatus.PAUSED])
