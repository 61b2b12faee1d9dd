"""The tray: a summary, at most five nodes (attention first, each with Retry), fixed items
always in place, updated in place and never while open."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QSystemTrayIcon

from cadre_desktop.ui.tray.status import TrayState
from cadre_desktop.ui.tray.tray import NODE_SLOTS
from tests.support.claim_link import claim
from tests.support.headless import fast_settings

#: The real node, unless the home holds a file `broken`: then it dies at once.
SWITCHABLE_NODE = [sys.executable, "-c", (
    "import os, runpy, sys\n"
    "if os.path.exists(os.path.join(os.environ['CADRE_NODE_DIR'], '..', '..', 'broken')):\n"
    "    sys.exit('broken on purpose')\n"
    "runpy.run_module('cadre_desktop.node', run_name='__main__')\n")]

FIXED = ["Open window", "Add node…", "Join with invitation…", "Lend nodes…", "Add a computer…", "Join computers…", "Pause all",
         "Preferences…", "Quit"]


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


# -- Pause all ------------------------------------------------------------------------------------

def test_pause_all_from_the_tray_greys_the_icon_says_so_and_resume_brings_the_nodes_back(shell, aio):
    tray, menu = shell.tray, shell.tray.menu
    assert [a.text() for a in tray.pause_menu.actions()] == ["30 minutes", "1 hour", "Until tomorrow (08:00)",
                                                              "Until I resume"]
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id) and shell.model.view(view.id).ready)
    tray.pause_menu.actions()[0].trigger()  # 30 minutes
    aio.wait(lambda: shell.host.get_node(view.id).status == "sleeping" and tray._state is TrayState.PAUSED)
    shown = texts(menu)
    assert shown[0] in ("Paused for 30 more minutes · 1 node: 0 running", "Paused for 29 more minutes · 1 node: 0 running")
    assert "Resume" in shown and "Pause all" not in shown
    assert tray.icon.toolTip().startswith("cadre-desktop: every node is paused for ")
    assert not shell.host.get_node(view.id).running
    tray.resume_action.trigger()
    aio.wait(lambda: shell.model.view(view.id).ready and tray._state is TrayState.UNCLAIMED)
    assert "Pause all" in texts(menu) and "Resume" not in texts(menu)
    assert shell.host.pause_state() == {"paused": False}


def test_until_i_resume_and_until_tomorrow_ask_the_host_for_the_pause_they_say(shell, aio):
    tray = shell.tray
    tray.pause_menu.actions()[3].trigger()  # until I resume
    aio.wait(lambda: shell.host.pause_state()["paused"])
    assert shell.host.pause_state()["until"] is None and texts(tray.menu)[0] == "Paused until you resume · No nodes yet"
    tray.pause_menu.actions()[2].trigger()  # until tomorrow: the next 08:00 here
    aio.wait(lambda: shell.host.pause_state()["until"] is not None)
    from datetime import datetime
    until = datetime.fromisoformat(shell.host.pause_state()["until"].replace("Z", "+00:00")).astimezone()
    assert (until.hour, until.minute) == (8, 0)
    aio.run(shell.host.resume_all())
