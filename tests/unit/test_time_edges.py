"""Issue 39 (6): times at the calendar's edges, in every parser that reads one (one place checks
them, `cadre_desktop/times.py`). `9999-12-31T23:00:00-05:00` is year 10000 in UTC and
`0001-01-01T00:00:00+05:00` year 0: both parsed, then overflowed where they were used."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

import pytest

from cadre_desktop.cli.when import pause_words, until_arg
from cadre_desktop.errors import Invalid, StorageError
from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.host.core.supervision.holds import parse_rfc3339, pause_end
from cadre_desktop.host.core.supervision.host_holds import load_pause
from cadre_desktop.times import EARLIEST, LATEST, parse_time, plus
from cadre_desktop.wire import runfile

OUTSIDE = ["9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59.999999+00:00",
           "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9000-01-01T00:00:01Z"]
INSIDE = ["2026-01-01T07:00:00+01:00", "2026-01-01T06:00:00Z", "2026-01-01T06:00:00z", "1970-01-01T00:00:00Z",
          "8999-12-31T18:00:00-05:00"]


@pytest.mark.parametrize("text", OUTSIDE)
def test_a_time_outside_the_calendars_window_is_no_time_in_any_zone_mode(text):
    for zone in ("required", "utc", "local"):
        assert parse_time(text, zone=zone) is None


@pytest.mark.parametrize("text", INSIDE)
def test_a_time_inside_the_window_is_taken_in_utc(text):
    when = parse_time(text)
    assert when is not None and when.tzinfo is UTC and EARLIEST <= when <= LATEST
    assert when + timedelta(days=366) > when  # a year can be added to it without an overflow


def test_the_zone_modes():
    assert parse_time("2026-01-01T07:00:00") is None
    assert parse_time("2026-01-01T07:00:00", zone="utc") == datetime(2026, 1, 1, 7, tzinfo=UTC)
    local = parse_time("2026-01-01T07:00:00", zone="local")
    assert local == datetime(2026, 1, 1, 7).astimezone().astimezone(UTC)
    for bad in ("", "x" * 65, None, 5, "tomorrow", "2026-13-01T00:00:00Z"):
        assert parse_time(bad, zone="utc") is None


def test_plus_is_none_past_the_calendar():
    assert plus(datetime(2026, 1, 1, tzinfo=UTC), timedelta(days=1)) == datetime(2026, 1, 2, tzinfo=UTC)
    assert plus(datetime(8999, 12, 31, tzinfo=UTC), timedelta(days=400)) is None
    assert plus(datetime(9999, 12, 31, tzinfo=UTC), timedelta(days=400)) is None


@pytest.mark.parametrize("text", OUTSIDE[:2])
def test_every_parser_refuses_the_edges(text, tmp_path):
    assert parse_iso(text) is None
    assert parse_rfc3339(text) is None
    assert runfile.wake_time(text, zone_required=True) is None
    assert runfile.wake_time(text, zone_required=False) is None
    with pytest.raises(runfile.BadRunFile, match="wake_at"):
        runfile.parse(json.dumps({"state": "sleeping", "wake_at": text}).encode())
    with pytest.raises(Invalid, match="wake_at"):  # the reference node's POST /host/run: a 400, not a 202
        runfile.checked({"state": "sleeping", "wake_at": text, "reason": ""})
    with pytest.raises(argparse.ArgumentTypeError, match="not a time"):
        until_arg(text)
    assert pause_words({"paused": True, "until": text}) == "paused (until an unreadable time)"
    pause = tmp_path / "host-pause.json"
    pause.write_text(json.dumps({"version": 1, "paused": True, "since": "2026-01-01T00:00:00Z", "until": text}))
    with pytest.raises(StorageError, match="fix or delete it"):
        load_pause(pause)
    pause.write_text(json.dumps({"version": 1, "paused": True, "since": text, "until": None}))
    with pytest.raises(StorageError, match="fix or delete it"):
        load_pause(pause)


def test_a_host_pause_file_nested_too_deeply_is_worded(tmp_path):
    pause = tmp_path / "host-pause.json"
    pause.write_text("[" * 3000)
    with pytest.raises(StorageError, match="fix or delete it"):
        load_pause(pause)


def test_a_pause_until_past_the_calendar_is_refused_in_words():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(Invalid):
        pause_end(now, None, datetime(9999, 12, 31, 23, tzinfo=UTC))
