"""The tray: the menu is built from state, never changed while open; every action has a parent."""

from __future__ import annotations

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QSystemTrayIcon

from cadre_desktop.ui.status import TrayState
from tests.ui.support import claim


def texts(menu) -> list[str]:
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def test_menu_lists_nodes_then_the_commands(shell, aio):
    menu = shell.tray.menu
    assert texts(menu) == ["No nodes yet", "Open window", "Add node…", "Join with invitation…",
                           "Lend nodes…", "Start at login", "Quit"]
    assert not menu.actions()[0].isEnabled()
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: texts(menu)[0] == "Kitchen: Waiting to be claimed")
    assert all(a.parent() is menu for a in menu.actions())

    menu.actions()[0].trigger()  # a node's line opens the window on it
    assert shell.window.isVisible() and shell.window.selected_id() == view.id


def test_menu_is_never_rebuilt_while_open(shell, aio, qtbot):
    menu = shell.tray.menu
    menu.popup(QPoint(0, 0))
    qtbot.waitExposed(menu)
    before, rebuilds = texts(menu), shell.tray.rebuilds
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id) and shell.model.view(view.id).ready)
    assert shell.tray.rebuilds == rebuilds and texts(menu) == before
    assert shell.tray._state is TrayState.UNCLAIMED  # the icon itself does follow
    menu.hide()
    aio.wait(lambda: texts(menu)[0] == "Kitchen: Waiting to be claimed")
    assert shell.tray.rebuilds == rebuilds + 1


def test_menu_is_rebuilt_only_when_what_it_shows_changes(shell, aio):
    view = aio.run(shell.host.add_node("Kitchen"))
    aio.wait(lambda: shell.model.view(view.id).ready)
    rebuilds = shell.tray.rebuilds
    for _ in range(5):
        shell.model.refresh()
    assert shell.tray.rebuilds == rebuilds
    assert claim(view.claim_url, "family")[0] == 200
    aio.wait(lambda: texts(shell.tray.menu)[0] == "Kitchen: Joined family")
    assert "Kitchen: Joined family" in shell.tray.icon.toolTip()


def test_start_at_login_is_a_check_that_follows_autostart(shell, aio):
    fake = shell.tray.autostart
    login = next(a for a in shell.tray.menu.actions() if a.text() == "Start at login")
    assert login.isCheckable() and not login.isChecked()
    login.trigger()
    assert fake.calls == ["enable"]
    aio.wait(lambda: next(a for a in shell.tray.menu.actions() if a.text() == "Start at login").isChecked())
    next(a for a in shell.tray.menu.actions() if a.text() == "Start at login").trigger()
    assert fake.calls == ["enable", "disable"]


def test_left_click_opens_the_window_and_quit_asks_to_quit(shell, qtbot):
    shell.tray.icon.activated.emit(QSystemTrayIcon.ActivationReason.Trigger)
    assert shell.window.isVisible()
    with qtbot.waitSignal(shell.quit_requested, timeout=1000):
        next(a for a in shell.tray.menu.actions() if a.text() == "Quit").trigger()
