"""The tray: a summary, at most five nodes (attention first, each with Retry), fixed items
always in place, updated in place and never while open."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QSystemTrayIcon

from cadre_desktop.ui.status import TrayState
from cadre_desktop.ui.tray import NODE_SLOTS
from tests.support.claim_link import claim
from tests.support.headless import fast_settings

#: The real node, unless the home holds a file `broken`: then it dies at once.
SWITCHABLE_NODE = [sys.executable, "-c", (
    "import os, runpy, sys\n"
    "if os.path.exists(os.path.join(os.environ['CADRE_NODE_DIR'], '..', '..', 'broken')):\n"
    "    sys.exit('broken on purpose')\n"
    "runpy.run_module('cadre_desktop.node', run_name='__main__')\n")]

FIXED = ["Open window", "Add node…", "Join with invitation…", "Lend nodes…", "Preferences…", "Quit"]


def texts(menu) -> list[str]:
    return [a.text() for a in menu.actions() if not a.isSeparator() and a.isVisible()]


def test_menu_has_a_summary_then_the_fixed_items(shell, aio):
    menu = shell.tray.menu
    assert texts(menu) == ["No nodes yet", *FIXED]
    assert not menu.actions()[0].isEnabled()
    view = aio.run(shell.host.add_node("Kitchen & Co"))
    aio.wait(lambda: "Kitchen && Co: Waiting to be claimed" in texts(menu))
    assert texts(menu) == ["1 node: 1 waiting to be claimed", "Kitchen && Co: Waiting to be claimed", *FIXED]
    assert all(a.parent() is menu for a in menu.actions())

    shell.tray.node_actions[0].trigger()  # a node's line opens the window on it
    assert shell.window.isVisible() and shell.window.selected_id() == view.id


def test_menu_is_never_changed_while_open(shell, aio, qtbot):
    menu = shell.tray.menu
    menu.popup(QPoint(0, 0))
    qtbot.waitExposed(menu)
    before, changes = texts(menu), shell.tray.changes
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id) and shell.model.view(view.id).ready)
    assert shell.tray.changes == changes and texts(menu) == before
    assert shell.tray._state is TrayState.UNCLAIMED  # the icon itself does follow
    menu.hide()
    aio.wait(lambda: "Kitchen: Waiting to be claimed" in texts(menu))


def test_menu_changes_only_when_what_it_shows_changes(shell, aio):
    shell.window.show()  # the model refreshes every second while the window is shown
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id).ready)
    items = list(shell.tray.menu.actions())
    changes = shell.tray.changes
    for _ in range(5):
        shell.model.refresh()
    assert shell.tray.changes == changes
    assert claim(view.claim_url, "family")[0] == 200
    aio.wait(lambda: "Kitchen: Joined family" in texts(shell.tray.menu))
    assert "Kitchen: Joined family" in shell.tray.icon.toolTip()
    assert shell.tray.menu.actions() == items  # the same QActions: updated in place, never rebuilt


@pytest.mark.slow
@pytest.mark.parametrize("settings_doc", [fast_settings(node_command=SWITCHABLE_NODE, sweep_ms=250)], indirect=True)
def test_many_nodes_show_five_attention_first_each_with_retry_then_show_all(shell, aio, qtbot, home):
    host = shell.host
    for i in range(3):
        aio.run(host.add_node(f"Fine {i}"))
    aio.wait(lambda: sum(v.ready for v in shell.model.views()) == 3)  # past the check for `broken`
    (home / "broken").write_text("")
    broken = [aio.run(host.add_node(f"Broken {i}")).id for i in range(2)]
    aio.wait(lambda: all(shell.model.view(n).status == "error" for n in broken))
    (home / "broken").unlink()
    for i in range(3, 6):
        aio.run(host.add_node(f"Fine {i}"))
    aio.wait(lambda: sum(v.running for v in shell.model.views()) == 6)
    menu = shell.tray.menu
    shown = aio.wait(lambda: (t := texts(menu))[0] == "8 nodes: 6 waiting to be claimed, 2 need you" and t)
    assert shown[1:5] == ["Broken 0: Error", "Retry Broken 0", "Broken 1: Error", "Retry Broken 1"]
    nodes = [t for t in shown[1:] if t.startswith(("Broken", "Fine"))]
    assert len(nodes) == NODE_SLOTS
    assert shown[-len(FIXED) - 1:] == ["Show all 8 nodes…", *FIXED]

    with qtbot.waitSignal(shell.tray.retry_node, timeout=1000) as signal:
        shell.tray.retry_actions[1].trigger()
    assert signal.args == [broken[1]]


def test_left_click_opens_the_window_and_quit_asks_to_quit(shell, qtbot):
    shell.tray.icon.activated.emit(QSystemTrayIcon.ActivationReason.Trigger)
    assert shell.window.isVisible()
    with qtbot.waitSignal(shell.quit_requested, timeout=1000):
        next(a for a in shell.tray.menu.actions() if a.text() == "Quit").trigger()
