"""The node window: an empty state, buttons that apply, Remove that asks first, a following log."""

from __future__ import annotations

import re
import sys

import pytest

from tests.support.claim_link import claim
from tests.support.headless import fast_settings
from tests.support.ui_shell import crashing_settings, give_up

#: The real node, unless the home holds a file `broken`: then it dies at once.
MENDABLE_NODE = [sys.executable, "-c", (
    "import os, runpy, sys\n"
    "if os.path.exists(os.path.join(os.environ['CADRE_NODE_DIR'], '..', '..', 'broken')):\n"
    "    sys.exit('broken on purpose')\n"
    "runpy.run_module('cadre_desktop.node', run_name='__main__')\n")]


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
    node_id = give_up(shell, aio)
    window.select(node_id)
    assert enabled(window) == {"retry", "remove", "log"}


def test_remove_asks_first_and_says_what_is_deleted(shell, aio, monkeypatch):
    from cadre_desktop.ui.prefs import dialogs

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


@pytest.mark.slow
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

    from cadre_desktop.keyrings.keyring_calls import BackendCalls
    from cadre_desktop.ui.prefs.dialogs import AddDialog

    monkeypatch.setattr(shell.host.secrets, "calls", BackendCalls(keyring.backends.fail.Keyring()))
    shell.ask_add()
    dialog = next(w for w in QApplication.topLevelWidgets() if w.windowTitle() == "Add node" and w.isVisible())
    assert isinstance(dialog, AddDialog)
    dialog.accept()
    box = aio.wait(lambda: next((w for w in QApplication.topLevelWidgets()
                                 if isinstance(w, QMessageBox) and w.isVisible()), None))
    assert box.text() == "Could not add a node."
    assert "No usable keyring" in box.informativeText()
    assert shell.model.rowCount() == 0


# -- the window that explains ------------------------------------------------------------------

@pytest.mark.parametrize("settings_doc", [crashing_settings()], indirect=True)
def test_details_pane_explains_a_node_in_error(shell, aio):
    window = shell.window
    node_id = give_up(shell, aio)
    window.select(node_id)
    text = aio.wait(lambda: "Stopped" in (t := window.details.text()) and t)
    assert "Garage" in text and f"Node id: {node_id}" in text
    assert "Stopped: the host gave up on it" in text
    reason = window.details.fields["reason"].text()
    assert "gave up after 3 attempts" in reason and reason.count("node exploded: bad config") == 1
    aio.wait(lambda: shell.model.refresh() or window.details.fields["decision"].text().startswith("give-up, at "))
    assert window.details.fields["exit"].text() == "1"
    assert "press Retry" in window.details.fields["next"].text()
    log_text = window.details.fields["log"].text()
    assert re.search(r"^\d\d:\d\d:\d\d  node exploded: bad config", log_text, re.M)
    assert log_text.count("node exploded: bad config") < 4  # repeats are folded, with their count
    assert "(×" in log_text


def test_details_pane_names_address_peer_and_next_step_of_an_unclaimed_node(shell, aio):
    view = added(shell, aio)
    shell.window.select(view.id)
    fields = shell.window.details.fields
    assert fields["status"].text() == "Running, waiting to be claimed"
    assert fields["address"].text() == f"127.0.0.1:{view.api_port} (API), P2P port {view.p2p_port}"
    assert aio.wait(lambda: shell.model.view(view.id).peer_id) == fields["peer"].text() or fields["peer"].text()
    assert "QR code" in fields["next"].text()


@pytest.mark.slow
def test_table_sorts_by_each_column_and_filters(shell, aio):
    from PySide6.QtCore import Qt

    from cadre_desktop.ui.nodes.model import ATTEMPTS, NAME

    window = shell.window
    for name in ("Cellar", "attic", "Barn"):
        shell.actions.add(name)
    aio.wait(lambda: shell.model.rowCount() == 3)
    names = lambda: [window.proxy.index(r, NAME).data() for r in range(window.proxy.rowCount())]  # noqa: E731
    assert names() == ["Cellar", "attic", "Barn"]  # added order until a header is clicked
    window.table.sortByColumn(NAME, Qt.SortOrder.AscendingOrder)
    assert names() == ["attic", "Barn", "Cellar"]
    window.table.sortByColumn(NAME, Qt.SortOrder.DescendingOrder)
    assert names() == ["Cellar", "Barn", "attic"]
    assert {window.proxy.index(r, ATTEMPTS).data() for r in range(3)} == {"0"}  # shown as 0, not blank

    window.filter.setText("BARN")  # any case; no hex id can contain it
    assert names() == ["Barn"] and window.selected_id() == shell.model.views()[2].id
    window.filter.setText(shell.model.views()[0].id)  # the id matches too
    assert names() == ["Cellar"]
    window.filter.clear()
    assert len(names()) == 3


def test_column_widths_do_not_follow_a_ticking_countdown(shell, aio):
    window = shell.window
    added(shell, aio)
    widths = [window.table.columnWidth(c) for c in range(shell.model.columnCount())]
    for _ in range(3):
        shell.model.refresh()
    assert [window.table.columnWidth(c) for c in range(shell.model.columnCount())] == widths


def test_the_selected_status_cell_uses_the_selection_text_colour(shell, aio):
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

    from cadre_desktop.ui.nodes.model import STATUS

    window = shell.window
    added(shell, aio)
    index = window.proxy.index(0, STATUS)
    delegate = window.table.itemDelegateForColumn(STATUS)
    plain, chosen = QStyleOptionViewItem(), QStyleOptionViewItem()
    chosen.state |= QStyle.StateFlag.State_Selected
    delegate.initStyleOption(plain, index)
    delegate.initStyleOption(chosen, index)
    assert chosen.palette.color(QPalette.ColorRole.Text) == chosen.palette.color(QPalette.ColorRole.HighlightedText)


@pytest.mark.parametrize("settings_doc", [crashing_settings()], indirect=True)
def test_opened_from_the_tray_the_node_that_needs_you_is_selected(shell, aio, qtbot):
    from cadre_desktop.ui.tray.status import needs_attention

    shell.actions.add("Garage")
    node_id = aio.wait(lambda: shell.model.rowCount() and shell.model.views()[0].id)
    aio.wait(lambda: needs_attention(shell.model.view(node_id)))
    shell.window.table.clearSelection()
    shell.tray.open_window.emit()
    qtbot.waitExposed(shell.window)
    assert shell.window.selected_id() == node_id and shell.window.retry_button.isEnabled()


# -- keyboard ----------------------------------------------------------------------------------

def test_the_table_is_one_tab_stop_and_enter_delete_ctrl_r_act_on_the_row(shell, aio, qtbot, monkeypatch):
    from PySide6.QtCore import Qt

    from cadre_desktop.ui.prefs import dialogs

    window = shell.window
    window.show()
    qtbot.waitExposed(window)
    view = added(shell, aio)
    assert not window.table.tabKeyNavigation()
    window.table.setFocus()
    with qtbot.waitSignal(window.qr_requested, timeout=1000) as opened:
        qtbot.keyClick(window.table, Qt.Key.Key_Return)
    assert opened.args == [view.id]

    asked = []
    monkeypatch.setattr(dialogs, "confirm", lambda *a, **k: asked.append(a[2]))
    qtbot.keyClick(window.table, Qt.Key.Key_Delete)
    assert asked == ["Remove Kitchen?"]

    from PySide6.QtGui import QKeySequence
    from PySide6.QtWidgets import QWidget

    ctrl_r = next(a for a in QWidget.actions(window) if a.shortcut() == QKeySequence("Ctrl+R"))
    ctrl_r.trigger()  # a running node: restart
    assert shell.actions.busy(view.id)
    aio.wait(lambda: not shell.actions.busy(view.id))


def test_every_button_has_a_mnemonic_and_a_tooltip_and_add_says_add(shell):
    from PySide6.QtWidgets import QApplication, QDialogButtonBox

    from cadre_desktop.ui.nodes.window import BUTTONS
    from cadre_desktop.ui.prefs.dialogs import AddDialog

    for attr, _text, _tip in BUTTONS:
        button = getattr(shell.window, attr)
        assert "&" in button.text() and button.toolTip(), attr
    shell.ask_add()
    dialog = next(w for w in QApplication.topLevelWidgets() if w.windowTitle() == "Add node" and w.isVisible())
    assert isinstance(dialog, AddDialog)
    assert dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).text() == "&Add"
    dialog.reject()


# -- size and place ----------------------------------------------------------------------------

def test_fit_rect_shrinks_and_moves_the_window_onto_the_screen():
    from PySide6.QtCore import QRect, QSize

    from cadre_desktop.ui.nodes.window import fit_rect

    screen = QRect(0, 0, 640, 400)  # 1280x800 at a scale of 2
    assert fit_rect(QRect(100, 50, 1100, 620), screen, QSize(420, 300)) == QRect(0, 0, 640, 400)
    assert fit_rect(QRect(3000, 900, 500, 300), screen, QSize(420, 300)) == QRect(140, 100, 500, 300)
    assert fit_rect(QRect(10, 10, 100, 100), QRect(0, 0, 300, 200), QSize(420, 300)) == QRect(0, 0, 300, 200)


def test_the_window_remembers_its_size_and_place_in_a_private_file(shell, qtbot):
    from PySide6.QtCore import QRect

    window = shell.window
    window.present()
    qtbot.waitExposed(window)
    window.setGeometry(QRect(40, 30, 700, 450))
    window.hide()
    state = shell.host.paths.config_dir / "window.json"
    assert state.stat().st_mode & 0o777 == 0o600
    again = type(window)(shell.host, shell.model, shell.actions, state)
    again.present()
    qtbot.waitExposed(again)
    assert again.size() == window.size()
    again.closing = True
    again.close()


def test_an_action_still_in_flight_when_the_shell_closes_ends_in_silence(shell, aio, caplog):
    import asyncio
    import logging

    answer = asyncio.Event()
    task = shell.actions.run("wait for an answer", answer.wait(), node_id="n00000000")
    assert shell.actions.busy("n00000000")
    shell.close()  # its Qt objects are deleted here and now
    answer.set()  # the answer comes after
    aio.wait(lambda: not shell.actions.busy("n00000000"))  # its done-callback has run
    assert task.cancelled()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_pause_then_resume_from_the_window_and_resume_from_the_tray(shell, aio):
    window = shell.window
    view = added(shell, aio)
    assert window.pause_button.isEnabled() and window.pause_button.text() == "&Pause"
    window.pause_button.click()
    paused = aio.wait(lambda: (v := shell.model.view(view.id)).status == "paused" and not v.running and v)
    assert paused.held_by == "person" and paused.attempts == 0
    aio.wait(lambda: not shell.actions.busy(view.id) and window.pause_button.text() == "Res&ume")
    window.pause_button.click()
    aio.wait(lambda: (v := shell.model.view(view.id)).status == "unclaimed" and v.ready)
    assert window.pause_button.text() == "&Pause"

    aio.run(shell.host.pause_node(view.id))
    shell.model.refresh()
    resume = aio.wait(lambda: next((a for a in shell.tray.retry_actions
                                    if a.isVisible() and a.text() == "Resume Kitchen"), None))
    resume.trigger()  # the tray's node entry: Resume
    aio.wait(lambda: (v := shell.model.view(view.id)).status == "unclaimed" and v.ready)


def test_details_say_how_a_held_node_comes_back():
    from dataclasses import replace

    from cadre_desktop.host.core.records.records import NodeStatus
    from cadre_desktop.ui.nodes.explain import next_step
    from tests.support.fake_host import make_view
    paused = make_view("n-1", "one", "paused", running=False, held_by="person", hold_reason="paused by a person")
    assert next_step(paused) == "It is paused (paused by a person); Resume starts it now, without counting an attempt."
    asleep = replace(paused, status=NodeStatus.SLEEPING, wake_at="2030-01-01T06:00:00.000Z", hold_reason="until the batch")
    assert next_step(asleep).startswith("It is asleep (until the batch) and starts by itself at ")
    battery = replace(paused, held_by="conditions", hold_reason="on battery")
    assert next_step(battery).startswith("Its run conditions hold it (on battery); it starts by itself when they allow")


def test_details_say_a_start_in_progress_in_the_seeds_words():
    from cadre_desktop.ui.nodes.explain import next_step
    from tests.support.fake_host import make_view
    words = "starting for 12 s of a 30 s grace (2 failed starts before; last: exited with code 1: x; started by h:1)"
    starting = make_view("n-1", "one", "joining", ready=False, starting=words)
    assert next_step(starting) == f"Nothing yet: it is on its way ({words})."


def test_filter_finds_names_and_addresses_with_dashes_spaces_and_dots(shell, aio):
    """Regression: the filter escaped its text as a pattern, so "Bulk-07", "Living room" and an
    address with a dot matched nothing."""
    from cadre_desktop.ui.nodes.model import NAME

    window = shell.window
    for name in ("Bulk-07", "Living room"):
        shell.actions.add(name)
    aio.wait(lambda: shell.model.rowCount() == 2 and all(v.api_port for v in shell.model.views()))
    names = lambda: [window.proxy.index(r, NAME).data() for r in range(window.proxy.rowCount())]  # noqa: E731
    window.filter.setText("bulk-07")
    assert names() == ["Bulk-07"]
    window.filter.setText(" Living room ")
    assert names() == ["Living room"]
    port = shell.model.views()[1].api_port
    window.filter.setText(f"127.0.0.1:{port}")
    assert names() == ["Living room"]
    window.filter.setText("nothing-like.this")
    assert names() == []


@pytest.mark.parametrize("settings_doc", [fast_settings(node_command=MENDABLE_NODE, sweep_ms=60_000)],
                         indirect=True)
def test_after_retry_the_details_say_the_new_decision_and_attempts_at_once(shell, aio, home):
    """Regression: after a Retry the pane kept "Last decision: give-up" until the next pass
    (up to a sweep later); the decision and the attempts are the retry's as soon as it returns."""
    from cadre_desktop.ui.nodes.model import ATTEMPTS

    window = shell.window
    (home / "broken").write_text("")
    node_id = give_up(shell, aio)
    window.select(node_id)
    aio.wait(lambda: shell.model.refresh() or window.details.fields["decision"].text().startswith("give-up"))
    (home / "broken").unlink()
    window.retry_button.click()
    aio.wait(lambda: not shell.actions.busy(node_id))
    assert window.details.fields["decision"].text().startswith("start, at ")
    assert "retry" in window.details.fields["decision"].text()
    view = shell.model.view(node_id)
    assert view.status != "error" and view.running
    assert shell.model.index(shell.model.row_of(node_id), ATTEMPTS).data() == str(shell.host.get_node(node_id).attempts)


def test_the_default_size_shows_every_column_and_the_whole_filter_placeholder(shell, aio, qtbot):
    """Regression: the default size hid Address, CPU, Memory and Reason behind a horizontal
    scrollbar, cut the filter's placeholder, and the status column was cut at 2× scale."""
    from PySide6.QtCore import QRect

    from cadre_desktop.ui.nodes.model import ERROR, STATUS
    from cadre_desktop.ui.nodes.table import REASON_AT_LEAST

    window, table = shell.window, shell.window.table
    added(shell, aio, "Living room")
    window._place(QRect(0, 0, 1920, 1080))  # a common screen at 1×
    window.present()
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: not table.horizontalScrollBar().isVisible())
    assert table.columnWidth(ERROR) >= table.fontMetrics().horizontalAdvance(REASON_AT_LEAST)
    assert table.columnWidth(STATUS) >= table.sizeHintForColumn(STATUS) + 16  # the dot and the words, with room
    placeholder = window.filter.fontMetrics().horizontalAdvance(window.filter.placeholderText())
    assert window.filter.width() >= placeholder + 24


def test_on_a_narrow_screen_the_details_go_under_a_table_that_shows_every_column(shell, aio, qtbot):
    """A 1280-pixel screen cannot hold every column and the details side by side: rather than a
    horizontal scrollbar, the details go under the table."""
    from PySide6.QtCore import QRect, Qt

    window, table = shell.window, shell.window.table
    added(shell, aio, "Living room")
    window._place(QRect(0, 0, 1280, 800))
    window.present()
    qtbot.waitExposed(window)
    assert window.splitters[0].orientation() is Qt.Orientation.Vertical
    qtbot.waitUntil(lambda: not table.horizontalScrollBar().isVisible())
    assert window.details.height() >= 200 and window.details.width() > table.wanted_width() - 40
    window._place(QRect(0, 0, 1920, 1080))  # wide enough again: side by side
    assert window.splitters[0].orientation() is Qt.Orientation.Horizontal


def test_a_window_built_after_the_nodes_opens_on_one_of_them(shell, aio, qtbot):
    """Regression: the window is built when first shown; rows already there were never
    "inserted" into it, so nothing was selected and the details pane stayed empty."""
    shell.actions.add("Kitchen")
    view = aio.wait(lambda: next((v for v in shell.model.views() if v.ready), None))
    assert shell._window is None
    shell.present_window()
    qtbot.waitExposed(shell.window)
    assert shell.window.selected_id() == view.id
    assert shell.window.details.title.text() == "Kitchen"


def test_a_filter_that_matches_nothing_says_so_in_the_table(shell, aio, qtbot):
    """Regression (issue 39): a filter matching no node showed an empty table with no word."""
    window = shell.window
    shell.actions.add("Kitchen")
    aio.wait(lambda: shell.model.rowCount() == 1)
    window.show()
    qtbot.waitExposed(window)
    note = window.table.no_match
    assert not note.isVisible()
    window.filter.setText("  garage  ")
    assert window.proxy.rowCount() == 0
    assert note.isVisible() and note.text() == "No node matches “garage”"
    assert window.pages.currentWidget() is window.table_page  # the table stays, with the words over it
    window.filter.setText("kit")
    assert window.proxy.rowCount() == 1 and not note.isVisible()
    window.filter.clear()
    assert not note.isVisible()
