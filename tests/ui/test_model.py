"""The node table follows the real host: add, claim, crash, give-up, retry, remove."""

from __future__ import annotations

import os
import re
import signal

import pytest
from PySide6.QtCore import Qt

from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.ui.nodes.model import ATTEMPTS, ERROR, NAME, STATUS
from cadre_desktop.ui.tray.status import COLOURS, HELD_COLOURS, TrayState
from tests.support.claim_link import claim
from tests.support.ui_shell import crashing_settings


def cell(shell, node_id: str, col: int) -> str:
    return shell.model.index(shell.model.row_of(node_id), col).data()


def test_model_follows_add_claim_crash_and_remove(shell, aio):
    assert shell.model.rowCount() == 0
    shell.actions.add("Kitchen")
    view = aio.wait(lambda: next((v for v in shell.model.views() if v.ready), None))
    assert cell(shell, view.id, NAME) == "Kitchen"
    assert cell(shell, view.id, STATUS) == "Waiting to be claimed"
    assert shell.tray._state is TrayState.UNCLAIMED

    assert claim(view.claim_url, "family")[0] == 200
    aio.wait(lambda: cell(shell, view.id, STATUS) == "Joined family")
    assert shell.tray._state is TrayState.JOINED

    os.kill(view.pid, signal.SIGKILL)
    healed = aio.wait(lambda: (v := shell.model.view(view.id)).running and v.pid != view.pid and v)
    assert healed.attempts == 1 and healed.peer_id == view.peer_id
    aio.wait(lambda: cell(shell, view.id, STATUS) == "Joined family")

    aio.run(shell.host.remove_node(view.id))
    assert shell.model.rowCount() == 0
    assert shell.tray._state is TrayState.EMPTY


@pytest.mark.slow
@pytest.mark.parametrize("settings_doc", [crashing_settings()], indirect=True)
def test_model_shows_the_give_up_with_its_reason_then_retry(shell, aio):
    shell.actions.add("Garage")
    node_id = aio.wait(lambda: shell.model.rowCount() and shell.model.views()[0].id)
    aio.wait(lambda: cell(shell, node_id, STATUS) == "Error")
    assert "gave up after 3 attempts" in cell(shell, node_id, ERROR)
    assert "node exploded: bad config" in shell.model.view(node_id).last_error
    assert shell.tray._state is TrayState.ERROR
    assert "Garage: Error" in shell.tray.icon.toolTip()

    shell.actions.retry(node_id)
    aio.wait(lambda: shell.model.view(node_id).status != "error")
    aio.wait(lambda: cell(shell, node_id, STATUS) == "Error")


@pytest.mark.parametrize("settings_doc", [crashing_settings(respawn_backoff_base_ms=2000,
                                                             respawn_backoff_max_ms=8000)], indirect=True)
@pytest.mark.slow
def test_countdown_to_the_next_retry_is_live(shell, aio):
    shell.window.show()  # the one-second tick runs while the window is shown
    shell.actions.add("Attic")
    node_id = aio.wait(lambda: shell.model.rowCount() and shell.model.views()[0].id)
    first = aio.wait(lambda: re.fullmatch(r"Restarting in (\d+) s", cell(shell, node_id, STATUS) or ""))
    assert re.fullmatch(r"\d+", cell(shell, node_id, ATTEMPTS))  # the countdown is in Status alone
    assert shell.tray._state is TrayState.BUSY
    later = aio.wait(lambda: (m := re.fullmatch(r"Restarting in (\d+) s", cell(shell, node_id, STATUS) or ""))
                     and int(m[1]) < int(first[1]) and m)
    assert int(later[1]) >= 1


def test_the_tick_runs_only_while_the_window_is_shown(shell, aio):
    assert not shell.model._tick.isActive()
    shell.window.show()
    assert shell.model._tick.isActive()
    shell.window.hide()
    assert not shell.model._tick.isActive()


def _dot_colour(shell, node_id: str) -> str:
    """The colour at the centre of the status dot the table draws."""
    icon = shell.model.index(shell.model.row_of(node_id), STATUS).data(Qt.ItemDataRole.DecorationRole)
    image = icon.pixmap(16, 16).toImage()
    return image.pixelColor(image.width() // 2, image.height() // 2).name()


def test_paused_and_sleeping_nodes_have_their_own_dot_not_the_joined_green(shell, aio):
    """Regression (issue 39): a paused or sleeping node was drawn with a joined node's green dot."""
    shell.actions.add("Kitchen")
    shell.actions.add("Attic")
    views = aio.wait(lambda: len(vs := [v for v in shell.model.views() if v.ready]) == 2 and vs)
    kitchen, attic = (v.id for v in views)
    for view in views:
        assert claim(view.claim_url, "family")[0] == 200
    aio.wait(lambda: all(cell(shell, n, STATUS) == "Joined family" for n in (kitchen, attic)))
    green = _dot_colour(shell, kitchen)
    assert green == COLOURS[TrayState.JOINED]

    aio.run(shell.host.pause_node(kitchen))
    aio.run(shell.host.pause_node(attic, for_ms=3_600_000))
    aio.wait(lambda: shell.model.view(kitchen).status == "paused" and shell.model.view(attic).status == "sleeping")
    paused, sleeping = _dot_colour(shell, kitchen), _dot_colour(shell, attic)
    assert paused == HELD_COLOURS[NodeStatus.PAUSED] and sleeping == HELD_COLOURS[NodeStatus.SLEEPING]
    assert len({green, paused, sleeping}) == 3
    row = shell.model.row_of(attic)
    assert shell.model.index(row, STATUS).data(Qt.ItemDataRole.ForegroundRole).name() == sleeping
