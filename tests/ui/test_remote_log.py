"""The window's log pane on another computer's node: its lines asked over the fleet link (read-only),
asked again while shown; a computer that cannot be reached is said so in the pane."""

from __future__ import annotations

from dataclasses import replace

from cadre_desktop.host.fleet.computers import Computer, FleetDoc
from cadre_desktop.host.fleet.peers import LinkDown
from cadre_desktop.jsontypes import JSONObject
from tests.support.fake_host import make_view

NAS: JSONObject = {"id": "pc_nas234567890", "name": "nas"}


class RemoteLog:
    """Stands in for the link: the other computer's node and its log, or a link that is down."""

    def __init__(self) -> None:
        self.lines = ["started", "listening on 127.0.0.1:9"]
        self.down = False
        self.asked: list[tuple[str, int]] = []

    async def log_tail(self, node_id: str, lines: int = 200) -> list[str]:
        self.asked.append((node_id, lines))
        if self.down:
            raise LinkDown("nas (pc_nas234567890) cannot be reached over the fleet link (TimeoutError); "
                           "the action is not known done there.")
        return list(self.lines)


def paired_with_a_remote_node(shell, monkeypatch) -> RemoteLog:
    fleet = shell.host.fleet
    monkeypatch.setattr(fleet, "doc", FleetDoc(fleet.doc.self_id, fleet.doc.self_cert, (
        Computer("pc_nas234567890", "nas", "127.0.0.1:9", "sha256:00", fleet.doc.self_cert or "x", "2026-12-07T01:00:00+00:00"),)))
    remote = [replace(make_view("n-remote1", "Attic", "joined"), computer=NAS)]

    async def refresh_remote():
        fleet.remote = list(remote)
        return fleet.remote

    log = RemoteLog()
    monkeypatch.setattr(fleet, "refresh_remote", refresh_remote)
    monkeypatch.setattr(fleet, "is_remote", lambda node_id: node_id == "n-remote1")
    monkeypatch.setattr(fleet, "log_tail", log.log_tail)
    return log


def shown_log_of_the_remote_node(shell, qtbot):
    window = shell.window
    window.show()
    qtbot.waitExposed(window)
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: shell.model.row_of("n-remote1") >= 0, timeout=10_000)
    assert window.select("n-remote1")
    window.log_button.click()
    assert window.log.isVisible() and window.log.isReadOnly()
    return window


def test_another_computers_node_log_is_shown_and_refreshed_while_shown(shell, aio, qtbot, monkeypatch):
    log = paired_with_a_remote_node(shell, monkeypatch)
    window = shown_log_of_the_remote_node(shell, qtbot)
    qtbot.waitUntil(lambda: window.log.toPlainText() == "started\nlistening on 127.0.0.1:9", timeout=10_000)
    assert log.asked[0] == ("n-remote1", 300)
    log.lines.append("claimed into cadre 'family'")
    qtbot.waitUntil(lambda: window.log.toPlainText().endswith("claimed into cadre 'family'"), timeout=10_000)
    window.log.hide()  # hidden: not asked any more (its timer stopped, a reload asks nothing)
    assert not window.log._timer.isActive()
    qtbot.waitUntil(lambda: window.log._asking is None or window.log._asking.done(), timeout=10_000)
    asked = len(log.asked)
    window.log.reload()
    assert len(log.asked) == asked


def test_a_computer_that_cannot_be_reached_is_said_so_in_the_pane_and_asked_again(shell, aio, qtbot, monkeypatch):
    log = paired_with_a_remote_node(shell, monkeypatch)
    log.down = True
    window = shown_log_of_the_remote_node(shell, qtbot)
    qtbot.waitUntil(lambda: "cannot be shown now" in window.log.toPlainText(), timeout=10_000)
    text = window.log.toPlainText()
    assert "nas (pc_nas234567890) cannot be reached" in text and "action" not in text
    log.down = False
    qtbot.waitUntil(lambda: window.log.toPlainText() == "started\nlistening on 127.0.0.1:9", timeout=10_000)
