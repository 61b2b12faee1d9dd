"""The run.json contract (wire/runfile.py), the one both sides use: the node's strict check of a
request refuses what is out of the contract, the host's check of a file refuses a document of
the wrong shape, and either way hostile text comes out bounded, printable and one line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from cadre_desktop.errors import Invalid
from cadre_desktop.host.core.supervision import runfile as host_side
from cadre_desktop.node.cadre import run_request as node_side
from cadre_desktop.wire.runfile import MAX_BYTES, NAME, REASON_MAX, STATES, WAKE_AT_MAX, BadRunFile, RunRequest, checked, parse, wake_time


def test_both_sides_name_the_one_contract():
    assert NAME == "run.json" and STATES == ("paused", "sleeping", "done")
    assert node_side.NAME is NAME and node_side.checked is checked
    assert host_side.NAME is NAME and host_side.MAX_BYTES == MAX_BYTES and host_side.parse is parse


@pytest.mark.parametrize("body, words", [
    ({"state": "paused", "extra": 1}, "unknown field(s): extra"),
    ({}, "state must be one of paused, sleeping, done"),
    ({"state": "asleep"}, "state must be one of"),
    ({"state": ["paused"]}, "state must be one of"),
    ({"state": "paused", "wake_at": "2030-01-01T00:00:00Z"}, "wake_at is for state sleeping only"),
    ({"state": "sleeping", "wake_at": "2030-01-01T00:00:00"}, "RFC 3339 time with its zone"),
    ({"state": "sleeping", "wake_at": "tomorrow"}, "RFC 3339 time with its zone"),
    ({"state": "sleeping", "wake_at": 1893456000}, "RFC 3339 time with its zone"),
    ({"state": "sleeping", "wake_at": "2030-01-01T00:00:00+00:00" + " " * WAKE_AT_MAX}, "RFC 3339"),
    ({"state": "done", "reason": 7}, f"at most {REASON_MAX} characters"),
    ({"state": "done", "reason": None}, f"at most {REASON_MAX} characters"),
    ({"state": "done", "reason": "x" * (REASON_MAX + 1)}, f"at most {REASON_MAX} characters"),
])
def test_the_node_refuses_a_request_out_of_the_contract(body, words):
    with pytest.raises(Invalid) as refused:
        checked(body)
    assert words in refused.value.message


def test_the_node_writes_what_it_was_asked_in_the_contracts_order_the_reason_one_line():
    doc = checked({"reason": "line one\n\x1b[31mline\ttwo ", "wake_at": "2030-01-01T00:00:00Z", "state": "sleeping"})
    assert list(doc) == ["state", "wake_at", "reason"]
    assert doc == {"state": "sleeping", "wake_at": "2030-01-01T00:00:00Z", "reason": "line one [31mline two"}
    assert checked({"state": "paused"}) == {"state": "paused", "wake_at": None, "reason": ""}


@pytest.mark.parametrize("raw, words", [
    (b"\xff\xfe", "not JSON"),
    (b"{", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"state": "asleep"}', "its state must be one of paused, sleeping, done"),
    (b'{"reason": "no state"}', "its state must be one of"),
    (b'{"state": "sleeping", "wake_at": "soon"}', "its wake_at is not an RFC 3339 time"),
    (b'{"state": "sleeping", "wake_at": 5}', "its wake_at is not an RFC 3339 time"),
    (json.dumps({"state": "sleeping", "wake_at": "2030-01-01T00:00:00Z" + " " * WAKE_AT_MAX}).encode(), "RFC 3339"),
    (b'{"state": "done", "reason": ["x"]}', "its reason is not a string"),
])
def test_the_host_refuses_a_file_out_of_the_contract(raw, words):
    with pytest.raises(BadRunFile) as refused:
        parse(raw)
    assert words in refused.value.message and refused.value.code == "bad_run_file"


def test_the_host_takes_a_file_leniently_and_its_hostile_reason_bounded_printable_one_line():
    raw = json.dumps({"state": "paused", "wake_at": "2030-01-01T00:00:00Z", "reason": "a\r\nb\x00" + "y" * 500,
                      "more": "ignored"}).encode()
    taken = parse(raw)
    assert taken.state == "paused" and taken.wake_at is None  # a wake time is for sleeping only
    assert len(taken.reason) == REASON_MAX and taken.reason.startswith("a b y") and taken.reason.endswith("…")
    assert taken.reason.isprintable() and "\n" not in taken.reason
    sleeping = parse(b'{"state": "sleeping", "wake_at": "2030-01-01T00:00:00", "reason": null}')
    assert sleeping == RunRequest("sleeping", datetime(2030, 1, 1, tzinfo=UTC), "")


def test_a_wake_time_without_its_zone_is_refused_only_where_the_zone_is_required():
    zoned = "2030-01-01T02:00:00+02:00"
    assert wake_time(zoned, zone_required=True) == datetime(2030, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    assert wake_time("2030-01-01T00:00:00", zone_required=True) is None
    assert wake_time("2030-01-01T00:00:00", zone_required=False) == datetime(2030, 1, 1, tzinfo=UTC)
    for bad in ("", None, 0, "x" * (WAKE_AT_MAX + 1)):
        assert wake_time(bad, zone_required=False) is None
