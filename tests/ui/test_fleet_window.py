"""The window over a fleet: another computer's nodes grouped after this one's, named with their computer,
acted on over the link; Quit counts only this computer's nodes."""

from __future__ import annotations

from dataclasses import replace

from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.host.fleet.computers import Computer, FleetDoc
from cadre_desktop.jsontypes import JSONObject
from tests.support.fake_host import make_view

NAS_ID = "pc_nas234567890"
NAS: JSONObject = {"id": NAS_ID, "name": "nas"}


class Link:
    """Stands in for the fleet link: the other computer's nodes, and the actions asked of them."""

    def __init__(self, fleet) -> None:
        self.fleet = fleet
        self.acted: list[tuple[str, str]] = []
        self.views = [replace(make_view("n-remote1", "Attic", "error"), computer=NAS, pid=999999)]

    async def refresh_remote(self):
        self.fleet.remote = list(self.views)
        return self.fleet.remote

    async def act(self, node_id: str, action: str):
        self.acted.append((node_id, action))
        return replace(self.views[0], status=NodeStatus.UNCLAIMED)


def added(shell, aio, name: str):
    shell.actions.add(name)
    return aio.wait(lambda: next((v for v in shell.model.views() if v.name == name), None))


def paired(shell, monkeypatch) -> Link:
    fleet = shell.host.fleet
    cert = fleet.doc.self_cert or "x"
    monkeypatch.setattr(fleet, "doc", FleetDoc(fleet.doc.self_id, fleet.doc.self_cert, (
        Computer("pc_nas234567890", "nas", "127.0.0.1:9", "sha256:00", cert, "2026-12-07T01:00:00+00:00"),)))
    link = Link(fleet)
    monkeypatch.setattr(fleet, "refresh_remote", link.refresh_remote)
    monkeypatch.setattr(fleet, "act", link.act)
    monkeypatch.setattr(fleet, "is_remote", lambda node_id: node_id == "n-remote1")
    return link


def test_the_window_groups_another_computers_nodes_after_this_ones(shell, aio, qtbot, monkeypatch):
    from cadre_desktop.ui.nodes.model import NAME

    paired(shell, monkeypatch)
    local = added(shell, aio, "Kitchen")
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: len(shell.model.views()) == 2, timeout=10_000)
    rows = [shell.model.text(v, NAME) for v in shell.model.views()]
    assert rows == ["Kitchen", "Attic · on nas"]
    assert shell.model.views()[0].id == local.id and shell.model.views()[0].computer["id"] == shell.host.fleet.self_id
    assert [v.id for v in shell.model.local_views()] == [local.id]
    assert "n-remote1" not in shell.model._usage  # another computer's pid is not sampled here


def test_a_retry_of_another_computers_node_goes_over_the_link(shell, aio, qtbot, monkeypatch):
    link = paired(shell, monkeypatch)
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: len(shell.model.views()) == 1, timeout=10_000)
    task = shell.actions.retry("n-remote1")
    qtbot.waitUntil(task.done, timeout=10_000)
    assert link.acted == [("n-remote1", "retry")] and task.exception() is None


def test_the_tray_counts_every_computer_and_its_nodes(shell, aio, qtbot, monkeypatch):
    paired(shell, monkeypatch)
    # paired now: the model follows the other computer without the window shown (its slow tick)
    assert shell.model._remote_tick.isActive()
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: len(shell.model.views()) == 1, timeout=10_000)
    shell.tray.update()
    assert shell.tray.summary.text().startswith("2 computers, 1 node")


def test_another_computers_give_up_is_told_once_by_the_tray_that_tells_it(shell, aio, qtbot, monkeypatch):
    link = paired(shell, monkeypatch)
    fleet = shell.host.fleet
    told: list[str] = []
    shell.notifier.shown.connect(lambda node_id, title, body: told.append(title))
    link.views = [replace(link.views[0], status=NodeStatus.JOINED)]
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: len(shell.model.views()) == 1, timeout=10_000)
    assert fleet.has_tray and fleet.notifies_for(NAS_ID)  # nas has no tray that answers: this one tells
    link.views = [replace(link.views[0], status=NodeStatus.ERROR, last_error="gave up after 3 attempts")]
    for _ in range(2):  # seen in error twice: told once
        shell.model.ask_remote()
        qtbot.waitUntil(lambda: shell.model._asking.done(), timeout=10_000)
    qtbot.waitUntil(lambda: told == ["Attic stopped on nas"], timeout=10_000)


def test_a_computer_with_its_own_tray_tells_its_own_give_ups(shell, monkeypatch):
    paired(shell, monkeypatch)
    fleet = shell.host.fleet
    state = fleet.reach.of(NAS_ID)
    state.state, state.tray = "online", True
    assert not fleet.notifies_for(NAS_ID)
    state.state = "unreachable"
    assert fleet.notifies_for(NAS_ID)


def test_a_node_first_seen_given_up_is_told_only_when_it_gave_up_since_the_app_started(shell, aio, qtbot, monkeypatch):
    from datetime import timedelta

    from cadre_desktop.ui.tray.status import utcnow

    link = paired(shell, monkeypatch)
    told: list[str] = []
    shell.notifier.shown.connect(lambda node_id, title, body: told.append(title))
    old = replace(link.views[0], status=NodeStatus.ERROR)  # updated 2024: before this app started
    new = replace(link.views[0], id="n-remote2", name="Shed", status=NodeStatus.ERROR,
                  updated_at=(utcnow() + timedelta(seconds=1)).isoformat())
    link.views = [old, new]
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: told == ["Shed stopped on nas"], timeout=10_000)


def test_a_two_computer_fleet_s_details_say_failover_needs_a_third(shell, aio, qtbot, monkeypatch):
    from cadre_desktop.host.fleetstate.takeover import THIRD_COMPUTER

    paired(shell, monkeypatch)
    local = added(shell, aio, "Study")
    window = shell.window
    window.select(local.id)
    aio.wait(lambda: shell.model.refresh() or THIRD_COMPUTER in window.details.fields["fleet"].text())
    check = window.details.failover
    assert not check.isChecked() and not check.isEnabled() and THIRD_COMPUTER in check.toolTip()
