"""The window over a fleet: another computer's nodes grouped after this one's, named with their computer,
acted on over the link; Quit counts only this computer's nodes."""

from __future__ import annotations

from dataclasses import replace

from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.host.fleet.computers import Computer, FleetDoc
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.ui.nodes.model import COLUMNS
from cadre_desktop.ui.tray.status import TrayState
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


# -- grouped by computer (issue 35, part 3) ------------------------------------------------------

TWIN_ID = "pc_twin34567890"
BOX_ID = "pc_box234567890"


def three(shell, monkeypatch) -> Link:
    """Paired with nas (Attic, Zed), a second computer also named nas (no nodes) and box (no nodes)."""
    link = paired(shell, monkeypatch)
    fleet = shell.host.fleet
    monkeypatch.setattr(type(fleet), "name", property(lambda self: "desk"))  # whatever this machine is called
    rows = fleet.doc.computers + tuple(
        Computer(cid, name, "127.0.0.1:9", f"sha256:0{i}", "y", "2026-12-07T01:00:00+00:00")
        for i, (cid, name) in enumerate(((TWIN_ID, "nas"), (BOX_ID, "box")), start=1))
    monkeypatch.setattr(fleet, "doc", FleetDoc(fleet.doc.self_id, fleet.doc.self_cert, rows))
    for cid in (NAS_ID, TWIN_ID, BOX_ID):
        fleet.reach.heard(cid)
    fleet.reach.of(NAS_ID).load = {"cpu_percent": 12.3, "memory_percent": 40.0}  # as its hello said
    link.views = [replace(link.views[0], status=NodeStatus.JOINED),
                  replace(make_view("n-remote2", "Zed", "joined"), computer=NAS, pid=999998)]
    monkeypatch.setattr(fleet, "is_remote", lambda node_id: node_id.startswith("n-remote"))
    return link


def listed(shell, qtbot, count: int) -> None:
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: len(shell.model.views()) == count, timeout=10_000)


def shown(window) -> list[str]:
    """The proxy's rows as the table shows them: a header's words, a node's name."""
    from cadre_desktop.ui.nodes.model import NAME

    proxy = window.proxy
    return [str(proxy.index(r, NAME).data()) for r in range(proxy.rowCount())]


def spans_follow_headers(window) -> bool:
    """Every header row spans the table, and no node row does (after a sort, a filter)."""
    from cadre_desktop.ui.nodes.model import HEADER_ROLE

    proxy = window.proxy
    return all((window.table.columnSpan(r, 0) == len(COLUMNS)) == bool(proxy.index(r, 0).data(HEADER_ROLE))
               for r in range(proxy.rowCount()))


def test_a_lone_computers_window_has_no_header_rows(shell, aio):
    from cadre_desktop.ui.nodes.model import HEADER_ROLE

    added(shell, aio, "Kitchen")
    proxy = shell.window.proxy
    assert [proxy.index(r, 0).data(HEADER_ROLE) for r in range(proxy.rowCount())] == [None]
    assert "Computer:" not in shell.window.details.text()


def test_each_computer_has_a_header_row_with_its_state_and_nodes(shell, aio, qtbot, monkeypatch):
    from PySide6.QtCore import Qt

    from cadre_desktop.ui.nodes.model import HEADER_ROLE

    three(shell, monkeypatch)
    added(shell, aio, "Kitchen")
    listed(shell, qtbot, 3)
    me = shell.host.fleet.name
    rows = shown(shell.window)
    assert rows[0].startswith(f"This computer · {me} · 1 node: ") and rows[1] == "Kitchen"
    assert rows[2:] == ["box · online · no nodes", "nas (pc_nas23) · online · 2 nodes: 2 running · CPU 12 %, memory 40 %",
                        "Attic · on nas (pc_nas23)", "Zed · on nas (pc_nas23)", "nas (pc_twin3) · online · no nodes"]
    proxy, model = shell.window.proxy, shell.model
    header = proxy.index(0, 0)
    assert header.data(HEADER_ROLE) and not model.flags(proxy.mapToSource(header)) & Qt.ItemFlag.ItemIsSelectable
    assert shell.window.table.columnSpan(0, 0) == len(COLUMNS)
    shell.window.table.selectRow(0)  # a header is no node: nothing selected, every node action off
    assert shell.window.selected_id() is None and not shell.window.remove_button.isEnabled()


def test_a_computers_state_is_said_since_when_in_local_time(shell):
    from datetime import UTC, datetime, timedelta

    from cadre_desktop.ui.nodes.computers import Group, away_words, clock_words, state_words

    now = datetime(2026, 12, 7, 15, 0, tzinfo=UTC)
    at = now - timedelta(minutes=55)
    local = at.astimezone()
    assert state_words(Group("pc_a", "nas"), now) == "online"
    assert state_words(Group("pc_a", "nas", state="asleep", since=at.isoformat()), now) == f"asleep since {local:%H:%M}"
    assert state_words(Group("pc_a", "nas", state="unreachable", since=at.isoformat()), now) == \
        f"unreachable since {local:%H:%M}"
    assert away_words(Group("pc_a", "nas", state="asleep", since=at.isoformat()), now) == \
        f"Not done: nas is asleep (since {local:%H:%M})."
    days_ago = (now - timedelta(days=3)).astimezone()
    assert clock_words(days_ago.isoformat(), now) == f"{days_ago.day} {days_ago:%b %H:%M}"


def test_sorting_sorts_the_nodes_within_each_computer(shell, aio, qtbot, monkeypatch):
    from PySide6.QtCore import Qt

    from cadre_desktop.ui.nodes.model import NAME

    three(shell, monkeypatch)
    added(shell, aio, "Kitchen")
    added(shell, aio, "Bedroom")
    listed(shell, qtbot, 4)
    table = shell.window.table
    nodes = lambda: [r for r in shown(shell.window) if "·" not in r or " · on " in r]  # noqa: E731
    heads = lambda: [r.split(" · ")[0] for r in shown(shell.window) if " · on " not in r and "·" in r]  # noqa: E731
    table.sortByColumn(NAME, Qt.SortOrder.AscendingOrder)
    assert nodes() == ["Bedroom", "Kitchen", "Attic · on nas (pc_nas23)", "Zed · on nas (pc_nas23)"]
    assert heads() == ["This computer", "box", "nas (pc_nas23)", "nas (pc_twin3)"]
    table.sortByColumn(NAME, Qt.SortOrder.DescendingOrder)
    assert nodes() == ["Kitchen", "Bedroom", "Zed · on nas (pc_nas23)", "Attic · on nas (pc_nas23)"]
    assert heads() == ["This computer", "box", "nas (pc_nas23)", "nas (pc_twin3)"]
    assert shown(shell.window)[0].startswith("This computer") and shown(shell.window)[3].startswith("box")
    assert spans_follow_headers(shell.window)


def test_the_filter_looks_across_computers_and_keeps_the_headers_of_those_with_matches(shell, aio, qtbot, monkeypatch):
    three(shell, monkeypatch)
    added(shell, aio, "Kitchen")
    listed(shell, qtbot, 3)
    window = shell.window
    window.filter.setText("zed")
    assert [r.split(" · ")[0] for r in shown(window)] == ["nas (pc_nas23)", "Zed"]
    assert spans_follow_headers(window)
    window.filter.setText("kitchen")
    assert [r.split(" · ")[0] for r in shown(window)] == ["This computer", "Kitchen"]
    assert window.selected_id() == shell.model.views()[0].id  # the first node, never its header
    window.filter.setText(shell.host.fleet.name)  # a computer's name: its nodes (this one's name none)
    assert [r.split(" · ")[0] for r in shown(window)][:2] == ["This computer", "Kitchen"]
    assert spans_follow_headers(window)
    window.filter.setText("")
    assert spans_follow_headers(window) and len(shown(window)) == 7  # 4 computers, 3 nodes
    window.filter.setText("nothing like it")
    assert shown(window) == [] and not window.table.no_match.isHidden()


def test_an_unreachable_computers_nodes_stay_greyed_and_an_action_on_them_is_refused_in_words(shell, aio, qtbot, monkeypatch):
    from datetime import timedelta

    from PySide6.QtCore import Qt

    from cadre_desktop.ui.nodes.model import GREY, STATUS, UPTIME
    from cadre_desktop.ui.tray.status import utcnow

    link = three(shell, monkeypatch)
    listed(shell, qtbot, 2)
    since = utcnow() - timedelta(minutes=3)
    state = shell.host.fleet.reach.of(NAS_ID)
    state.state, state.since = "unreachable", since.isoformat()
    link.views = []  # nas did not answer: its nodes as last seen
    shell.model.ask_remote()
    qtbot.waitUntil(lambda: shell.model._asking.done(), timeout=10_000)
    assert [v.name for v in shell.model.views()] == ["Attic", "Zed"]
    hhmm = f"{since.astimezone():%H:%M}"
    row = shell.model.row_of("n-remote1")
    cell = shell.model.index(row, STATUS)
    assert cell.data() == "Joined" and cell.data(Qt.ItemDataRole.ForegroundRole).name() == GREY  # as last known
    seen = str(shell.model.index(row, UPTIME).data())
    assert seen.startswith("last seen ") and len(seen) == len("last seen 14:05")
    assert f"nas (pc_nas23) · unreachable since {hhmm}" in shown(shell.window)[2]
    shell.window.select("n-remote1")
    assert f"Computer: nas ({NAS_ID}) · unreachable since {hhmm}" in shell.window.details.text()
    task = shell.actions.retry("n-remote1")
    qtbot.waitUntil(task.done, timeout=10_000)
    assert link.acted == []
    assert task.exception().message == f"Not done: nas (pc_nas23) cannot be reached (since {hhmm})."


def test_a_link_that_fails_on_the_way_says_the_action_was_not_done(shell, aio, qtbot, monkeypatch):
    from cadre_desktop.host.fleet.peers import LinkDown

    link = three(shell, monkeypatch)
    listed(shell, qtbot, 2)

    async def dropped(node_id: str, action: str):
        link.acted.append((node_id, action))
        raise LinkDown("nas (pc_nas234567890) cannot be reached over the fleet link (TimeoutError)")
    monkeypatch.setattr(shell.host.fleet, "act", dropped)
    task = shell.actions.restart("n-remote2")
    qtbot.waitUntil(task.done, timeout=10_000)
    assert link.acted == [("n-remote2", "restart")]
    assert task.exception().message.startswith("Not done: nas (pc_nas23) cannot be reached (since ")


def test_the_details_name_the_nodes_computer(shell, aio, qtbot, monkeypatch):
    three(shell, monkeypatch)
    local = added(shell, aio, "Kitchen")
    listed(shell, qtbot, 3)
    window = shell.window
    window.select(local.id)
    assert f"Computer: This computer ({shell.host.fleet.name})" in window.details.text()
    window.select("n-remote2")
    assert f"Computer: nas ({NAS_ID}) · online" in window.details.text()


def test_the_tray_counts_every_computer_names_their_nodes_and_says_which_cannot_be_reached(shell, aio, qtbot, monkeypatch):
    link = three(shell, monkeypatch)
    link.views = [link.views[0], *link.views[1:]]  # Attic gave up (error), Zed joined
    link.views[0] = replace(link.views[0], status=NodeStatus.ERROR)
    shell.actions.add("Kitchen")
    aio.wait(lambda: any(v.name == "Kitchen" and v.ready for v in shell.host.list_nodes()), timeout=60)
    listed(shell, qtbot, 3)
    shell.tray.update()
    assert shell.tray.summary.text() == "4 computers, 3 nodes: 2 running, 1 waiting to be claimed, 1 needs you"
    assert shell.tray.node_actions[0].text() == "Attic · on nas (pc_nas23): Error"
    assert shell.tray.retry_actions[0].text() == "Retry Attic · on nas (pc_nas23)"
    assert "Attic · on nas (pc_nas23): Error" in shell.tray.icon.toolTip()
    assert shell.tray._state is TrayState.ERROR  # another computer's node that gave up colours the tray
    state = shell.host.fleet.reach.of(BOX_ID)
    state.state, state.since = "unreachable", "2026-12-07T10:00:00+00:00"
    shell.model.refresh()
    shell.tray.update()
    assert shell.tray.summary.text().endswith("1 needs you; 1 computer unreachable")
    assert shell.tray.icon.toolTip().endswith("\n1 computer of the fleet cannot be reached")


def test_the_arrows_step_over_a_computers_header_to_the_next_node(shell, aio, qtbot, monkeypatch):
    from PySide6.QtCore import Qt

    three(shell, monkeypatch)
    local = added(shell, aio, "Kitchen")
    listed(shell, qtbot, 3)
    window = shell.window
    window.present()
    window.select(local.id)
    window.table.setFocus()
    qtbot.keyClick(window.table, Qt.Key.Key_Down)  # over "box · no nodes" and nas's header
    assert window.selected_id() == "n-remote1"
    qtbot.keyClick(window.table, Qt.Key.Key_Up)
    assert window.selected_id() == local.id
    qtbot.keyClick(window.table, Qt.Key.Key_Up)  # only this computer's header above: stays
    assert window.selected_id() == local.id


def test_a_computer_renamed_moves_its_group_and_the_selection_follows_its_node(shell, aio, qtbot, monkeypatch):
    three(shell, monkeypatch)
    listed(shell, qtbot, 2)
    window = shell.window
    window.select("n-remote2")
    fleet = shell.host.fleet
    renamed = tuple(replace(c, name="zulu") if c.id == NAS_ID else c for c in fleet.doc.computers)
    monkeypatch.setattr(fleet, "doc", FleetDoc(fleet.doc.self_id, fleet.doc.self_cert, renamed))
    shell.model.refresh()
    assert [r.split(" · ")[0] for r in shown(window)][1:] == ["box", "nas", "zulu", "Attic", "Zed"]
    assert window.selected_id() == "n-remote2" and spans_follow_headers(window)
    assert shell.model.label(shell.model.view("n-remote2")) == "Zed · on zulu"


def test_the_rows_follow_computers_gaining_and_losing_nodes_and_the_selection_stays_on_its_node(shell, qtbot, monkeypatch):
    import random

    from PySide6.QtCore import Qt

    from cadre_desktop.ui.nodes.model import HEADER_ROLE

    link = three(shell, monkeypatch)
    listed(shell, qtbot, 2)
    shell.window.select("n-remote1")  # Attic on nas: never removed below
    twin: JSONObject = {"id": TWIN_ID, "name": "nas"}
    pool = [replace(make_view(f"n-remote{i}", f"Node {i}", "joined"), computer=(NAS, twin)[i % 2],
                    created_at=f"2026-12-07T0{i % 10}:00:00+00:00") for i in range(3, 15)]
    rng = random.Random(35)
    for _ in range(25):
        link.views = [link.views[0], *rng.sample(pool, rng.randint(0, len(pool)))]
        shell.model.ask_remote()
        qtbot.waitUntil(lambda: shell.model._asking.done(), timeout=10_000)
        model = shell.model
        got = [(bool(model.index(r, 0).data(HEADER_ROLE)), model.index(r, 0).data(Qt.ItemDataRole.UserRole))
               for r in range(model.rowCount())]
        want_nas = sorted((v for v in link.views if (v.computer or {})["id"] == NAS_ID), key=lambda v: (v.created_at, v.id))
        want_twin = sorted((v for v in link.views if (v.computer or {})["id"] == TWIN_ID), key=lambda v: (v.created_at, v.id))
        assert got == [(True, None), (True, None), (True, None), *((False, v.id) for v in want_nas),
                       (True, None), *((False, v.id) for v in want_twin)]
        assert shell.window.selected_id() == "n-remote1"


def test_remove_of_another_computers_node_asks_in_its_computers_words(shell, qtbot, monkeypatch):
    from cadre_desktop.ui.prefs import dialogs

    link = three(shell, monkeypatch)
    listed(shell, qtbot, 2)
    asked: list = []
    monkeypatch.setattr(dialogs, "confirm", lambda *a, **k: asked.append((a, k)))
    shell.window.select("n-remote2")
    shell.window.remove_button.click()
    (parent, title, text, yes, then), options = asked[0]
    assert text == "Remove Zed · on nas (pc_nas23)?" and "work folder (on nas (pc_nas23))" in options["detail"]
    then()
    qtbot.waitUntil(lambda: link.acted == [("n-remote2", "remove")], timeout=10_000)


def test_a_two_computer_fleet_s_details_say_failover_needs_a_third(shell, aio, qtbot, monkeypatch):
    from cadre_desktop.host.fleetstate.takeover import THIRD_COMPUTER

    paired(shell, monkeypatch)
    local = added(shell, aio, "Study")
    window = shell.window
    window.select(local.id)
    aio.wait(lambda: shell.model.refresh() or THIRD_COMPUTER in window.details.fields["fleet"].text())
    check = window.details.failover
    assert not check.isChecked() and not check.isEnabled() and THIRD_COMPUTER in check.toolTip()
