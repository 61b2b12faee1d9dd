"""Status words and the tray's aggregate state, from views alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.ui.tray.status import (
    TrayState,
    aggregate,
    attention_first,
    duration_words,
    exit_line,
    menu_words,
    retry_words,
    status_words,
    summary_line,
    tooltip,
    uptime_words,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
BASE = NodeView(
    id="n1", name="Kitchen", status=NodeStatus.UNCLAIMED, mode="claim", running=True, ready=True, pid=10, api_port=1, p2p_port=2,
    peer_id=None, cadre=None, attempts=0, next_retry_at=None, last_error=None, claim_url=None,
    advertise_host="127.0.0.1", created_at="", updated_at="", started_at=iso(NOW - timedelta(minutes=3)),
    log_path="",
)


def node(**changes) -> NodeView:
    return replace(BASE, **changes)


@pytest.mark.parametrize("changes, words", [
    ({}, "Waiting to be claimed"),
    ({"status": "joining"}, "Joining…"),
    ({"status": "joined", "cadre": "family"}, "Joined family"),
    ({"status": "error", "running": False}, "Error"),
    ({"status": "spawning", "running": False}, "Starting…"),
    ({"status": "joined", "ready": False}, "Starting…"),
    ({"running": False, "next_retry_at": iso(NOW + timedelta(seconds=11.2))}, "Restarting in 12 s"),
    ({"running": False}, "Restarting…"),
])
def test_status_in_words(changes, words):
    assert status_words(node(**changes), NOW) == words


def test_countdown_and_uptime():
    down = node(running=False, attempts=2, next_retry_at=iso(NOW + timedelta(seconds=12)))
    assert retry_words(down, NOW) == "2"  # the countdown is the status column's
    assert retry_words(node(attempts=0), NOW) == "0"  # 0 is shown, not left blank
    assert uptime_words(node(), NOW) == "3 min"
    assert uptime_words(down, NOW) == ""
    assert [duration_words(s) for s in (5, 3700, 90000)] == ["5 s", "1 h 1 min", "1 d 1 h"]


def test_aggregate_is_the_worst_state_in_a_fixed_order():
    joined = node(status="joined", cadre="c")
    unclaimed = node()
    backing_off = node(status="joined", running=False)
    starting = node(status="spawning", running=False)
    not_answering_yet = node(ready=False)
    error = node(status="error", running=False)
    assert aggregate([]) is TrayState.EMPTY
    assert aggregate([joined, joined]) is TrayState.JOINED
    assert aggregate([joined, unclaimed]) is TrayState.UNCLAIMED
    assert aggregate([unclaimed, backing_off, joined]) is TrayState.BUSY
    assert aggregate([starting, unclaimed]) is TrayState.BUSY
    assert aggregate([joined, not_answering_yet]) is TrayState.BUSY
    assert aggregate([joined, error, backing_off, unclaimed]) is TrayState.ERROR


def test_tooltip_names_the_worst_nodes_first():
    text = tooltip([node(status="joined", cadre="c", name="A"), node(status="error", name="B")], NOW)
    assert text.splitlines() == ["cadre-desktop: a node needs attention", "B: Error", "A: Joined c"]
    assert "no nodes" in tooltip([], NOW)


# -- the tray menu's words and order -----------------------------------------------------------

def test_summary_line_counts_running_and_needing_you():
    assert summary_line([]) == "No nodes yet"
    assert summary_line([node(status="joined", cadre="c")]) == "1 node: 1 running"
    views = [node(id=str(i), status="joined") for i in range(6)] + [node(id="e", status="error", running=False)]
    assert summary_line(views) == "7 nodes: 6 running, 1 needs you"
    assert summary_line(views + [node(id="f", status="error", running=False)]) == "8 nodes: 6 running, 2 need you"
    assert summary_line([node(status="error", running=False)]) == "1 node: 0 running, 1 needs you"


def test_summary_line_counts_nodes_waiting_to_be_claimed_apart():
    """Regression: 30 unclaimed nodes and a joined one said "31 nodes: 31 running"."""
    views = [node(id="j", status="joined")] + [node(id=str(i)) for i in range(30)]
    assert summary_line(views) == "31 nodes: 1 running, 30 waiting to be claimed"
    assert summary_line([node()]) == "1 node: 1 waiting to be claimed"
    starting = node(id="s", ready=False)  # running, not yet claimable: starting, so running
    assert summary_line([node(), starting]) == "2 nodes: 1 running, 1 waiting to be claimed"


def test_menu_words_carry_no_countdown():
    down = node(running=False, next_retry_at=iso(NOW + timedelta(seconds=12)))
    assert menu_words(down) == "Restarting…"
    assert menu_words(node(status="joined", cadre="family")) == "Joined family"


def test_attention_first_keeps_order_within_a_kind():
    a, b = node(id="a", status="joined", cadre="c"), node(id="b")
    e1, e2 = node(id="e1", status="error", running=False), node(id="e2", status="error", running=False)
    assert [v.id for v in attention_first([a, e1, b, e2])] == ["e1", "e2", "b", "a"]


def test_exit_line_prefers_the_engine_words_then_the_quoted_log_then_the_reason():
    reason = "gave up after 3 attempts: exit code 4\nLast log lines:\nstarting\ncannot open /dev/ttyUSB0\n"
    assert exit_line(node(), reason) == "cannot open /dev/ttyUSB0"
    assert exit_line(node(), "never answered within 15 s") == "never answered within 15 s"

    class WithExit:
        last_exit = "exited with code 3: cannot open /dev/ttyUSB0"
    # a view from a newer engine, which has the field the pane prefers
    assert exit_line(WithExit(), reason) == "exited with code 3: cannot open /dev/ttyUSB0"  # type: ignore[arg-type]


# -- the details pane's words ------------------------------------------------------------------

def test_details_words_for_a_node_in_error(tmp_path):
    from cadre_desktop.ui.nodes import explain

    log = tmp_path / "node.log"
    log.write_text("--- cadre-desktop: starting node n1 at 2026-01-02T03:00:00+00:00 ---\n"
                   "boom\n--- cadre-desktop: starting node n1 at 2026-01-02T03:00:05+00:00 ---\nboom\n"
                   "2026-01-02T03:00:06+00:00 INFO node n1: other\n"
                   '2026-01-02T03:00:07 INFO aiohttp.access: 127.0.0.1 "GET /status" 200\n')
    v = node(status="error", running=False, last_error="gave up after 3 attempts: (exit code 4)\nLast log lines:\nboom",
             log_path=str(log))
    assert explain.state_words(v, NOW).startswith("Stopped")
    assert explain.reason_words(v) == "gave up after 3 attempts: (exit code 4)"
    assert explain.exit_code(v) == 4
    assert "Retry" in explain.next_step(v)
    lines = explain.log_lines(log)
    assert [(line.text, line.count) for line in lines] == [("boom", 2), ("INFO node n1: other", 1)]
    assert lines[0].at == datetime(2026, 1, 2, 3, 0, 5, tzinfo=UTC)
    assert "(×2)" in explain.log_words(lines)


def test_details_words_read_new_engine_fields_when_there():
    from cadre_desktop.ui.nodes import explain

    class Newer:
        status, running, ready, attempts, next_retry_at, cadre = "unclaimed", False, False, 0, None, None
        last_error = None
        last_exit = "exited with code 3: cannot open /dev/ttyUSB0"
        exit_code = 3
        waiting_for = "keyring"
        last_decision = {"decision": "wait", "at": iso(NOW - timedelta(seconds=5)), "ms": 0.2, "error": None}
    v: Any = Newer()  # a view from a newer engine: fields NodeView does not have yet
    assert explain.exit_code(v) == 3
    assert explain.state_words(v, NOW).startswith("Waiting for the keyring")
    assert "Unlock your keyring" in explain.next_step(v)
    assert explain.decision_words(v, NOW).startswith("wait, at ") and "(5 s ago)" in explain.decision_words(v, NOW)
    assert explain.reason_words(v) == "exited with code 3: cannot open /dev/ttyUSB0"
