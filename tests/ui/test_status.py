"""Status words and the tray's aggregate state, from views alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from cadre_desktop.host.clock import iso
from cadre_desktop.host.views import NodeView
from cadre_desktop.ui.status import (
    TrayState, aggregate, duration_words, retry_words, status_words, tooltip, uptime_words,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
BASE = NodeView(
    id="n1", name="Kitchen", status="unclaimed", mode="claim", running=True, ready=True, pid=10, api_port=1, p2p_port=2,
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
    assert retry_words(down, NOW) == "2 · next retry in 12 s"
    assert retry_words(node(attempts=1), NOW) == "1"
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
