"""Each node's history: kept from the engine's events, bounded, 0600, across restarts, dropped with the node."""

from __future__ import annotations

import asyncio
import json
import stat
import threading
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.core.events import EventKind, HostEvent
from cadre_desktop.host.core.ops import history as history_module
from cadre_desktop.host.core.ops.history import KEEP_S, MAX_ENTRIES, HistoryState, NodeHistory, state_of_view
from cadre_desktop.host.core.records.records import NodeStatus
from tests.support.clock import FakeClock
from tests.support.fake_host import make_view

UP = make_view("n1", "Kitchen", started_at="2026-01-01T00:00:00+00:00")


class Views:
    """What the history reads of a node: its view now."""

    def __init__(self) -> None:
        self.views = {"n1": UP}

    def set(self, **changes) -> None:
        self.views["n1"] = replace(self.views["n1"], **changes)

    def __call__(self, node_id: str):
        return self.views.get(node_id)


def made(tmp_path, clock=None, views=None):
    clock, views = clock or FakeClock(), views or Views()
    history = NodeHistory(tmp_path / "node-history.json", clock, views)
    history.load()
    return history, clock, views


def changed(history) -> None:
    history.on_event(HostEvent(EventKind.CHANGED, "n1"))


def test_states_spans_restarts_and_uptime_from_events(tmp_path):
    history, clock, views = made(tmp_path)
    changed(history)  # up
    clock.advance(3600)
    views.set(running=False)  # it died
    changed(history)
    clock.advance(600)
    views.set(running=True, ready=False, started_at="2026-01-01T01:10:00+00:00")
    changed(history)
    clock.advance(60)
    views.set(ready=True)
    changed(history)
    clock.advance(3000)
    day = history.windows("n1")[0]
    assert day.name == "24h"
    assert [(s.state, round(s.end - s.start)) for s in day.spans] == [
        (HistoryState.UP, 3600), (HistoryState.DOWN, 600), (HistoryState.STARTING, 60), (HistoryState.UP, 3000)]
    assert len(day.restarts) == 1  # the first start is no restart; the second is
    assert day.uptime_percent == round(100 * 6600 / 7260, 2)
    doc = history.to_json("n1")
    assert [w["name"] for w in doc["windows"]] == ["24h", "7d"] and doc["windows"][0]["restarts"] == 1


def test_the_states_a_view_can_be_in():
    assert state_of_view(UP) is HistoryState.UP
    assert state_of_view(replace(UP, ready=False)) is HistoryState.STARTING
    assert state_of_view(replace(UP, running=False)) is HistoryState.DOWN
    assert state_of_view(replace(UP, running=False, status=NodeStatus.ERROR)) is HistoryState.GAVE_UP
    held: Any = SimpleNamespace(status="paused", running=False, ready=False, started_at=None)  # the holds' statuses
    assert state_of_view(held) is HistoryState.PAUSED


def test_kept_across_a_host_restart_with_the_gap_unknown(tmp_path):
    history, clock, views = made(tmp_path)
    changed(history)
    clock.advance(1800)
    history.host_stopped()  # written at once
    mode = stat.S_IMODE((tmp_path / "node-history.json").stat().st_mode)
    assert mode == 0o600
    clock.advance(900)
    again, _, _ = made(tmp_path, clock, views)
    again.observe("n1")  # the same child, re-attached: no restart
    clock.advance(300)
    day = again.windows("n1")[0]
    assert [(s.state, round(s.end - s.start)) for s in day.spans] == [
        (HistoryState.UP, 1800), (HistoryState.NONE, 900), (HistoryState.UP, 300)]
    assert day.restarts == () and day.uptime_percent == 100.0  # no host, no count


def test_bounded_over_a_simulated_month(tmp_path):
    history, clock, views = made(tmp_path)
    for minute in range(0, 30 * 24 * 60, 5):  # a node that flaps every five minutes for a month
        views.set(running=minute % 10 == 0, started_at=f"start-{minute}")
        changed(history)
        clock.advance(300)
    history.save()
    assert history.entry_count("n1") <= 2 * MAX_ENTRIES
    week = history.windows("n1")[1]
    assert week.spans[0].start >= clock.now().timestamp() - KEEP_S
    size = (tmp_path / "node-history.json").stat().st_size
    assert size < 2 * MAX_ENTRIES * 40, size
    entries = json.loads((tmp_path / "node-history.json").read_text())["nodes"]["n1"]["entries"]
    assert len(entries) <= MAX_ENTRIES and min(t for t, _ in entries) >= clock.now().timestamp() - KEEP_S - 1


def test_dropped_with_the_node(tmp_path):
    history, clock, views = made(tmp_path)
    changed(history)
    history.save()
    history.on_event(HostEvent(EventKind.REMOVED, "n1"))
    history.save()
    assert json.loads((tmp_path / "node-history.json").read_text())["nodes"] == {}
    assert history.windows("n1")[0].spans == ()


def test_lending_events_are_not_a_hosted_nodes_history(tmp_path):
    history, _, _ = made(tmp_path)
    history.on_event(HostEvent(EventKind.DONATION_CHANGED, "n1"))
    assert history.entry_count("n1") == 0


def test_an_unreadable_history_is_set_aside_and_a_new_one_begun(tmp_path):
    (tmp_path / "node-history.json").write_text('{"version": 1, "nodes": {"n1": {"entries": [[1, "sideways"]]}}}')
    history, _, _ = made(tmp_path)
    assert (tmp_path / "node-history.json.broken").exists()
    changed(history)
    history.save()
    assert "n1" in json.loads((tmp_path / "node-history.json").read_text())["nodes"]


def test_the_cli_strip_shows_each_slice_worst_state_and_marks_restarts():
    from cadre_desktop.cli.history import LEGEND, strip_lines

    def at(hours: float) -> str:
        return f"2026-03-01T{int(hours):02d}:{int(hours % 1 * 60):02d}:00+00:00"

    day = {"name": "24h", "start": at(0), "end": "2026-03-02T00:00:00+00:00", "uptime_percent": 95.0,
           "restarts": 1, "restart_times": [at(12.1)],
           "spans": [{"state": "up", "start": at(0), "end": at(12)},
                     {"state": "down", "start": at(12), "end": at(12.1)},  # six minutes: its slice shows it
                     {"state": "up", "start": at(12.1), "end": "2026-03-02T00:00:00+00:00"}]}
    lines = strip_lines({"windows": [day]}, width=24)
    assert lines[0] == "24 h |" + "█" * 12 + "░" + "█" * 11 + "| 95.00 % up, 1 restart"
    assert lines[1] == " " * 6 + " " * 12 + "^"
    assert lines[-1] == LEGEND


async def test_a_save_after_events_is_written_on_the_hosts_writer_thread_and_the_last_one_at_stop_here(
        tmp_path, monkeypatch):
    """A storm's history is no fsync on the event loop: `save_soon` hands its write to the writer
    thread; the host's stop (the writer already closed) writes it on the spot."""
    monkeypatch.setattr(history_module, "SAVE_DELAY_S", 0.01)
    real, threads = write_json_atomic, []

    def write(path, doc, **kw):
        threads.append(threading.current_thread().name)
        real(path, doc, **kw)
    monkeypatch.setattr("cadre_desktop.host.core.ops.history.write_json_atomic", write)
    writer = GroupWriter()
    history = NodeHistory(tmp_path / "node-history.json", FakeClock(), Views(), writer)
    changed(history)
    async with asyncio.timeout(10):
        while not threads:
            await asyncio.sleep(0.005)  # a poll of a condition with a deadline
    writer.close()
    assert threads == ["cadre-writer"]
    assert "n1" in json.loads((tmp_path / "node-history.json").read_text())["nodes"]
    history.host_stopped()
    assert threads == ["cadre-writer", threading.current_thread().name]


def test_a_crash_told_after_its_respawn_began_is_still_a_down_span_and_a_restart(tmp_path):
    """The exit's event waited behind a write while the pass started the next child: read then,
    the view already says starting. The crash is still down, for as long as it lasted."""
    history, clock, views = made(tmp_path)
    changed(history)  # up
    clock.advance(600)
    views.set(running=True, ready=False, started_at="2026-01-01T00:10:00+00:00")  # already respawned
    history.on_event(HostEvent(EventKind.EXITED, "n1", "was killed by SIGKILL"))
    clock.advance(1)
    changed(history)  # the start's own event: starting
    clock.advance(60)
    views.set(ready=True)
    changed(history)
    day = history.windows("n1")[0]
    assert [(s.state, round(s.end - s.start)) for s in day.spans][:3] == [
        (HistoryState.UP, 600), (HistoryState.DOWN, 1), (HistoryState.STARTING, 60)]
    assert len(day.restarts) == 1


def test_a_down_span_shorter_than_a_millisecond_is_still_there_once_read_back(tmp_path):
    """The file keeps milliseconds: a crash whose respawn's event came 0.2 ms after its exit's
    was a down span of no length after a host restart, and the strip showed no crash."""
    history, clock, views = made(tmp_path)
    changed(history)  # up
    clock.advance(600)
    history.on_event(HostEvent(EventKind.EXITED, "n1", "was killed by SIGKILL"))
    clock.advance(0.0002)
    views.set(running=True, ready=False, started_at="2026-01-01T00:10:00+00:00")
    changed(history)
    clock.advance(60)
    history.save()
    again, _, _ = made(tmp_path, clock, views)
    states = [s.state for s in again.windows("n1")[0].spans]
    assert states[:3] == [HistoryState.UP, HistoryState.DOWN, HistoryState.STARTING], states


def test_a_host_restart_is_no_down_moment_the_gap_stays_unknown(tmp_path):
    history, clock, views = made(tmp_path)
    changed(history)  # up
    clock.advance(600)
    history.host_stopped()
    clock.advance(60)
    again, _, _ = made(tmp_path, clock, views)
    views.set(started_at="2026-01-01T00:11:00+00:00")  # started again by the new host
    again.observe("n1")
    clock.advance(60)
    assert [s.state for s in again.windows("n1")[0].spans] == [HistoryState.UP, HistoryState.NONE, HistoryState.UP]


def test_the_cli_strip_shows_a_crash_in_the_windows_last_second():
    """The API's times are whole seconds: a crash in the last second of the window starts at its
    end, and was one slice past the strip (a side-by-side run's strip showed it starting only)."""
    from cadre_desktop.cli.history import strip_lines

    end = "2026-01-02T00:00:00+00:00"
    doc = {"windows": [{"name": "24h", "start": "2026-01-01T00:00:00+00:00", "end": end, "uptime_percent": 99.0,
                        "restarts": 1, "restart_times": [end],
                        "spans": [{"state": "up", "start": "2026-01-01T00:00:00+00:00", "end": end},
                                  {"state": "down", "start": end, "end": end},
                                  {"state": "starting", "start": end, "end": end}]}]}
    assert strip_lines(doc)[0] == "24 h |" + "█" * 47 + "░| 99.00 % up, 1 restart"


def test_a_resume_after_pause_all_is_no_down_moment_and_no_restart(tmp_path):
    """Regression (issue 39, item 12): the node released from a hold was read down (not running
    yet) for the few milliseconds before its start, and its start counted as a restart."""
    history, clock, views = made(tmp_path)
    changed(history)  # up
    clock.advance(600)
    views.set(running=False, ready=False, status=NodeStatus.PAUSED)
    history.on_event(HostEvent(EventKind.HELD, "n1", "paused by a person"))
    clock.advance(300)
    views.set(status=NodeStatus.JOINED)  # released: its child not started yet
    changed(history)  # the release's events, as the lifecycle tells them: changed, then resumed
    history.on_event(HostEvent(EventKind.RESUMED, "n1", "resume"))
    clock.advance(0.004)
    views.set(running=True, ready=False, started_at="2026-01-01T00:15:00+00:00")
    changed(history)
    clock.advance(0.5)
    views.set(ready=True)
    changed(history)
    clock.advance(60)
    day = history.windows("n1")[0]
    assert HistoryState.DOWN not in [s.state for s in day.spans], day.spans
    assert day.restarts == (), "a resume after a hold counted as a restart"
    assert day.uptime_percent == 100.0, "a planned start-up counted as not up"


def test_a_new_nodes_start_up_is_not_counted_against_its_uptime(tmp_path):
    """Regression (issue 39, item 12): a 2 s old node showed 78 % uptime (its first 0.44 s starting)."""
    views = Views()
    views.set(ready=False)
    history, clock, _ = made(tmp_path, views=views)
    changed(history)  # starting
    clock.advance(0.44)
    views.set(ready=True)
    changed(history)
    clock.advance(1.56)
    assert history.windows("n1")[0].uptime_percent == 100.0


def test_a_crashs_restart_still_counts_its_start_up_as_down_time_and_a_restart(tmp_path):
    history, clock, views = made(tmp_path)
    changed(history)  # up
    clock.advance(90)
    history.on_event(HostEvent(EventKind.EXITED, "n1", "exited with code 1"))
    views.set(running=True, ready=False, started_at="2026-01-01T00:01:30+00:00")
    clock.advance(5)
    changed(history)
    clock.advance(5)
    views.set(ready=True)
    changed(history)
    day = history.windows("n1")[0]
    assert len(day.restarts) == 1 and day.uptime_percent == 90.0, (day.restarts, day.uptime_percent)


def test_a_nodes_own_hold_after_its_exit_0_is_no_down_moment(tmp_path):
    """A node that asks to sleep exits with code 0 and is held a moment later (issue 39, item
    12: a planned hold counted as down time); a crash's down before a later pause stays down."""
    history, clock, views = made(tmp_path)
    changed(history)  # up
    clock.advance(600)
    views.set(running=False, ready=False, exit_code=0)
    changed(history)  # an exit's events: changed, then exited
    history.on_event(HostEvent(EventKind.EXITED, "n1", "exited with code 0"))
    clock.advance(0.01)
    views.set(status=NodeStatus.SLEEPING)
    changed(history)
    history.on_event(HostEvent(EventKind.HELD, "n1", "nothing until then"))
    clock.advance(60)
    assert [s.state for s in history.windows("n1")[0].spans] == [HistoryState.UP, HistoryState.PAUSED]
    views.set(status=NodeStatus.JOINED, running=True, ready=True, exit_code=None, started_at="later")
    changed(history)
    clock.advance(60)
    views.set(running=False, ready=False, exit_code=1)
    changed(history)
    history.on_event(HostEvent(EventKind.EXITED, "n1", "exited with code 1"))
    clock.advance(30)
    views.set(status=NodeStatus.PAUSED)
    changed(history)
    history.on_event(HostEvent(EventKind.HELD, "n1", "paused by a person"))
    clock.advance(10)
    states = [s.state for s in history.windows("n1")[0].spans]
    assert states[-2:] == [HistoryState.DOWN, HistoryState.PAUSED], states


def test_a_start_that_fails_after_a_resume_is_down(tmp_path):
    history, clock, views = made(tmp_path)
    views.set(running=False, ready=False, status=NodeStatus.PAUSED)
    changed(history)
    clock.advance(60)
    views.set(status=NodeStatus.JOINED)
    changed(history)
    history.on_event(HostEvent(EventKind.RESUMED, "n1", "resume"))
    clock.advance(1)
    views.set(last_error="could not be started: no such file")  # its start failed: down
    changed(history)
    clock.advance(60)
    assert [s.state for s in history.windows("n1")[0].spans] == [HistoryState.PAUSED, HistoryState.DOWN]


def test_a_failover_and_a_move_here_are_marks_with_their_words_kept_across_a_restart(tmp_path):
    history, clock, views = made(tmp_path)
    history.on_event(HostEvent(EventKind.FAILED_OVER, "n1", "Kitchen moved to nas: laptop lost its lease\x1b[2J at 14:02"))
    clock.advance(60)
    history.on_event(HostEvent(EventKind.MOVED, "n1", "moved here from another computer of the fleet"))
    clock.advance(60)
    history.host_stopped()
    again, _, _ = made(tmp_path, clock, views)
    doc = again.to_json("n1")["windows"][0]
    assert [a["kind"] for a in doc["arrivals"]] == ["failed_over", "moved"]
    assert doc["arrivals"][0]["words"].startswith("Kitchen moved to nas") and "\x1b" not in doc["arrivals"][0]["words"]
