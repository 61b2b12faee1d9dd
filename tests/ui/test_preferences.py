"""Preferences: checked like settings.json, written atomically 0600, applied live; settings.json
edited by hand is picked up or refused; Quit asks once how to treat the nodes."""

from __future__ import annotations

import json
import shlex
import sys

import psutil
import pytest
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from tests.support.headless import fast_settings
from tests.support.ui_shell import crashing_settings, give_up

WRAPPED_NODE = [sys.executable, "-c", "import runpy; runpy.run_module('cadre_desktop.node', run_name='__main__')"]


def message_box():
    return next((w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()), None)


def ready_node(shell, aio, name="Kitchen"):
    shell.actions.add(name)
    return aio.wait(lambda: next((v for v in shell.model.views() if v.name == name and v.ready), None))


def test_preferences_show_the_settings_in_use(shell, settings_doc):
    dialog = shell.ask_preferences()
    assert dialog.advertise.text() == "127.0.0.1"
    assert [dialog.port_low.value(), dialog.port_high.value()] == settings_doc["port_range"]
    assert dialog.node_command.text() == ""  # the default node
    assert dialog.notify.isChecked() and dialog.notify_gave_up.isChecked() and dialog.ask_on_quit.isChecked()
    assert shell.ask_preferences() is dialog  # one at a time
    dialog.reject()


@pytest.mark.parametrize("field, value, words", [
    ("advertise", "http://10.0.0.5:80", "'advertise_host' must be a bare host name"),
    ("node_command", "python -c 'unclosed", "not a valid command line"),
    ("ports", (30010, 30000), "'port_range' must satisfy 1024 <= first <= second"),
])
def test_invalid_input_is_refused_in_the_dialog_and_nothing_is_written(shell, home, field, value, words):
    before = (home / "settings.json").read_bytes()
    dialog = shell.ask_preferences()
    if field == "ports":
        dialog.port_low.setValue(value[0])
        dialog.port_high.setValue(value[1])
    else:
        getattr(dialog, field).setText(value)
    dialog.accept()
    assert dialog.isVisible() and dialog.error.isVisible()
    assert words in dialog.error.text()
    assert (home / "settings.json").read_bytes() == before
    dialog.reject()


def test_saving_writes_only_what_changed_atomically_and_0600_and_applies_it(shell, home, qtbot):
    dialog = shell.ask_preferences()
    dialog.notify_claimed.setChecked(False)
    with qtbot.waitSignal(dialog.saved, timeout=2000):
        dialog.accept()
    doc = json.loads((home / "settings.json").read_text())
    assert doc["notify_claimed"] is False and "notify_gave_up" not in doc and "node_command" not in doc
    assert (home / "settings.json").stat().st_mode & 0o777 == 0o600
    assert shell.settings.notify_claimed is False and shell.notifier.settings.notify_claimed is False
    qtbot.waitUntil(lambda: shell.host.settings.notify_claimed is False)


@pytest.mark.slow
def test_a_new_node_command_restarts_running_nodes_without_spending_their_budget(shell, aio):
    first, second = ready_node(shell, aio, "Kitchen"), ready_node(shell, aio, "Attic")
    dialog = shell.ask_preferences()
    dialog.node_command.setText(shlex.join(WRAPPED_NODE))
    dialog.accept()
    for old in (first, second):
        new = aio.wait(lambda o=old: (v := shell.model.view(o.id)).ready and v.pid != o.pid and v)
        assert "runpy" in " ".join(psutil.Process(new.pid).cmdline())
        assert new.attempts == old.attempts == 0
    assert json.loads(shell.host.paths.settings_file.read_text())["node_command"] == WRAPPED_NODE


@pytest.mark.slow
@pytest.mark.parametrize("settings_doc", [crashing_settings()], indirect=True)
def test_retry_after_fixing_the_node_command_uses_the_new_one(shell, aio):
    node_id = give_up(shell, aio)
    dialog = shell.ask_preferences()
    assert "node exploded" in dialog.node_command.text()
    dialog.node_command.setText("")  # back to the reference node
    dialog.accept()
    assert not dialog.isVisible()
    aio.wait(lambda: not shell.actions.busy(""))
    assert shell.model.view(node_id).status == "error"  # a node given up on waits for Retry
    shell.actions.retry(node_id)
    view = aio.wait(lambda: (v := shell.model.view(node_id)).ready and v)
    assert view.status == "unclaimed" and "cadre_desktop.node" in " ".join(psutil.Process(view.pid).cmdline())


def test_a_new_port_range_moves_only_the_nodes_outside_it(shell, aio, settings_doc):
    view = ready_node(shell, aio)
    low = settings_doc["port_range"][0] + 20
    dialog = shell.ask_preferences()
    dialog.port_low.setValue(low)
    dialog.port_high.setValue(low + 9)
    dialog.accept()
    moved = aio.wait(lambda: (v := shell.model.view(view.id)).ready and v.pid != view.pid and v)
    assert low <= moved.api_port <= low + 9 and low <= moved.p2p_port <= low + 9
    assert moved.attempts == 0


def test_settings_json_edited_by_hand_is_picked_up(shell, home, aio):
    doc = {**fast_settings(), "notifications": False}
    doc["port_range"] = json.loads((home / "settings.json").read_text())["port_range"]
    (home / "settings.json").write_text(json.dumps(doc))
    aio.wait(lambda: shell.settings.notifications is False)
    assert shell.notifier.settings.notifications is False


def test_a_broken_hand_edit_is_refused_with_its_error_and_changes_nothing(shell, home, aio):
    before = shell.settings
    (home / "settings.json").write_text('{"notifications": "yes"}')
    box = aio.wait(message_box)
    assert box.text() == "Could not use the edited settings.json."
    assert "'notifications' must be true or false" in box.informativeText()
    assert shell.settings is before
    box.close()


# -- quitting ----------------------------------------------------------------------------------

def test_quit_asks_once_whether_to_stop_the_nodes_and_remembers(shell, aio, qtbot, home):
    from cadre_desktop.ui.prefs.dialogs import QUIT_LEAVE

    view = ready_node(shell, aio)
    shell.ask_quit()
    box = aio.wait(message_box)
    assert "Stop the 1 node too, or leave it running?" == box.text()
    box.checkBox().setChecked(True)  # don't ask again
    leave = next(b for b in box.buttons() if b.text() == QUIT_LEAVE)
    with qtbot.waitSignal(shell.quit_requested, timeout=2000):
        leave.click()
    doc = json.loads((home / "settings.json").read_text())
    assert doc["keep_nodes_running_on_quit"] is True and doc["ask_on_quit"] is False
    aio.run(shell.stop())
    assert psutil.Process(view.pid).is_running()  # left running, as answered
    psutil.Process(view.pid).kill()


def test_quit_does_not_ask_when_told_not_to_or_nothing_runs(shell, aio, qtbot):
    with qtbot.waitSignal(shell.quit_requested, timeout=1000):
        shell.ask_quit()  # nothing runs
    assert message_box() is None
    ready_node(shell, aio)
    shell.settings = shell.settings.with_changes(ask_on_quit=False)
    with qtbot.waitSignal(shell.quit_requested, timeout=1000):
        shell.ask_quit()
    assert message_box() is None


def test_cancel_quits_nothing(shell, aio, qtbot):
    ready_node(shell, aio)
    quits = []
    shell.quit_requested.connect(lambda: quits.append(1))
    shell.ask_quit()
    box = aio.wait(message_box)
    box.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.waitUntil(lambda: not box.isVisible())
    assert quits == []


def test_an_answer_without_dont_ask_again_changes_no_preference(shell, aio, qtbot, home):
    """Regression: each answer was saved as *Keep nodes running*, changing the preference and
    the next question's default button without a word."""
    from cadre_desktop.ui.prefs.dialogs import QUIT_LEAVE

    view = ready_node(shell, aio)
    before = (home / "settings.json").read_text()
    shell.ask_quit()
    box = aio.wait(message_box)
    leave = next(b for b in box.buttons() if b.text() == QUIT_LEAVE)
    assert box.defaultButton() is not leave  # the preference says stop them
    with qtbot.waitSignal(shell.quit_requested, timeout=2000):
        leave.click()
    assert (home / "settings.json").read_text() == before and not shell.settings.keep_nodes_running_on_quit
    aio.run(shell.stop())
    assert psutil.Process(view.pid).is_running()  # this quit left it running, as answered
    psutil.Process(view.pid).kill()


@pytest.mark.parametrize("layout", range(4))  # QDialogButtonBox: Windows, macOS, KDE, GNOME
def test_cancel_is_never_between_the_two_answers(shell, aio, qtbot, layout):
    from PySide6.QtWidgets import QProxyStyle, QStyle

    from cadre_desktop.ui.prefs.dialogs import QUIT_LEAVE, QUIT_STOP, ask_how_to_quit

    class Layout(QProxyStyle):
        def styleHint(self, hint, *args):  # noqa: N802
            return layout if hint == QStyle.StyleHint.SH_DialogButtonLayout else super().styleHint(hint, *args)

    box = ask_how_to_quit(None, 2, False, lambda *a: None)
    style = Layout()
    box.setStyle(style)
    for child in box.findChildren(QWidget):
        child.setStyle(style)
    qtbot.waitExposed(box)
    box.adjustSize()
    at = {b.text(): b.mapTo(box, b.rect().topLeft()).x() for b in box.buttons()}
    answers = sorted((at[QUIT_STOP], at[QUIT_LEAVE]))
    assert not answers[0] < at[box.button(QMessageBox.StandardButton.Cancel).text()] < answers[1], at
    box.close()


# -- When to run --------------------------------------------------------------------------------

def test_when_to_run_shows_the_conditions_and_saves_a_schedule_across_midnight(shell, home):
    dialog = shell.ask_preferences()
    when = dialog.when
    assert dialog.pages.tabText(1) == "&When to run" and dialog.caps is when.caps
    assert when.battery.isChecked() and when.metered.isChecked() and not when.in_use.isChecked()
    assert not when.idle_minutes.isEnabled() and when.idle_minutes.value() == 3
    assert not when.scheduled.isChecked() and not when.grid.isEnabled()
    when.in_use.setChecked(True)
    when.idle_minutes.setValue(5)
    when.battery.setChecked(False)
    when.scheduled.setChecked(True)  # a first window: the weeknights, 22:00 to 07:00
    assert when.grid.rowCount() == 1
    dialog.accept()
    assert not dialog.isVisible(), dialog.error.text()
    saved = json.loads((home / "settings.json").read_text())
    assert saved["pause_on_battery"] is False and saved["pause_when_in_use"] is True
    assert saved["in_use_idle_minutes"] == 5
    assert saved["run_schedule"] == [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00"}]
    again = shell.ask_preferences()
    assert again.when.grid.rowCount() == 1 and again.when.scheduled.isChecked() and again.when.in_use.isChecked()
    again.reject()


@pytest.mark.parametrize(("edit", "words"), [
    (lambda g: g.item(0, 8).setText("07:00") or g.item(0, 7).setText("07:00"), "it is empty"),
    (lambda g: g.item(0, 7).setText("late"), "times like 07:00"),
    (lambda g: [g.item(0, c).setCheckState(__import__("PySide6.QtCore").QtCore.Qt.CheckState.Unchecked)
                for c in range(7)], "non-empty list"),
])
def test_a_bad_window_is_one_clear_error_naming_run_schedule_and_nothing_is_written(shell, home, edit, words):
    before = (home / "settings.json").read_bytes()
    dialog = shell.ask_preferences()
    dialog.when.scheduled.setChecked(True)
    edit(dialog.when.grid)
    dialog.accept()
    assert dialog.isVisible() and "run_schedule" in dialog.error.text() and words in dialog.error.text()
    assert (home / "settings.json").read_bytes() == before
    dialog.reject()


def _row(grid, row: int) -> tuple[list[str], str, str]:
    from PySide6.QtCore import Qt

    from cadre_desktop.settings import DAYS

    days = [d for c, d in enumerate(DAYS) if grid.item(row, c).checkState() == Qt.CheckState.Checked]
    return days, grid.item(row, 7).text(), grid.item(row, 8).text()


def test_the_schedule_grid_shows_all_seven_days_at_the_dialogs_default_size(shell, qtbot):
    """Regression (issue 39): Monday to Thursday showed, the rest behind a scrollbar."""
    dialog = shell.ask_preferences()
    dialog.pages.setCurrentWidget(dialog.when)
    qtbot.waitExposed(dialog)
    grid = dialog.when.grid
    dialog.when.scheduled.setChecked(True)
    qtbot.waitUntil(lambda: grid.isVisible())
    last = grid.columnCount() - 1
    assert last == 8  # seven days, from, to
    assert grid.columnViewportPosition(last) + grid.columnWidth(last) <= grid.viewport().width()
    assert all(grid.columnWidth(c) > 0 and not grid.isColumnHidden(c) for c in range(last + 1))
    assert not grid.horizontalScrollBar().isVisible()
    dialog.reject()


def test_add_window_adds_the_days_no_window_has_then_an_empty_window_to_edit(shell, qtbot):
    """Regression (issue 39): *Add window* added a copy of the default row."""
    dialog = shell.ask_preferences()
    when = dialog.when
    dialog.pages.setCurrentWidget(when)
    qtbot.waitExposed(dialog)
    when.scheduled.setChecked(True)
    assert _row(when.grid, 0) == (["mon", "tue", "wed", "thu", "fri"], "22:00", "07:00")
    when.add_window.click()
    assert when.grid.rowCount() == 2
    assert _row(when.grid, 1) == (["sat", "sun"], "00:00", "24:00")  # the weekend, all day
    when.add_window.click()
    assert _row(when.grid, 2) == ([], "", "")  # every day has a window: an empty one, to fill in
    assert when.grid.currentRow() == 2 and when.grid.state() == when.grid.State.EditingState
    dialog.reject()
