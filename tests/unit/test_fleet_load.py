"""How busy a computer says it is over the fleet link: its own figures bounded, another's checked as hostile."""

from __future__ import annotations

import math

from cadre_desktop.host.fleet import load


def test_this_computers_load_is_two_bounded_figures_or_null():
    here = load.here()
    assert set(here) == {"cpu_percent", "memory_percent"}
    for value in here.values():
        assert value is None or (isinstance(value, float) and 0 <= value <= load.MAX)


def test_another_computers_load_is_kept_only_as_numbers_within_bounds():
    assert load.checked({"cpu_percent": 12.345, "memory_percent": 40}) == {"cpu_percent": 12.3, "memory_percent": 40.0}
    assert load.checked({"cpu_percent": 2000, "memory_percent": -1}) is None
    assert load.checked({"cpu_percent": True, "memory_percent": "40"}) is None
    assert load.checked({"cpu_percent": math.nan, "memory_percent": math.inf}) is None
    assert load.checked({"cpu_percent": 5, "extra": "x" * 10_000}) == {"cpu_percent": 5.0, "memory_percent": None}
    assert load.checked("busy") is None and load.checked(None) is None and load.checked([1, 2]) is None


def test_a_figure_out_of_bounds_here_is_clamped_not_sent_as_is():
    assert load._bounded(5000.0) == load.MAX and load._bounded(-3) == 0.0 and load._bounded(math.nan) is None


def test_fleet_list_shows_each_computers_load_and_a_dash_where_none_was_said():
    from cadre_desktop.cli.fleet import computers_table, load_words

    assert load_words({"cpu_percent": 12.3, "memory_percent": 40.0}) == "CPU 12 %, memory 40 %"
    assert load_words({"cpu_percent": None, "memory_percent": 7}) == "memory 7 %"
    assert load_words(None) == "-" and load_words({"cpu_percent": True}) == "-" and load_words("high") == "-"
    text = computers_table([{"id": "pc_nas234567890", "name": "nas", "state": "online", "address": "10.0.0.2:28091",
                             "last_seen": "2026-12-07T12:00:00+00:00", "load": {"cpu_percent": 3, "memory_percent": 51}}])
    assert "LOAD" in text.splitlines()[0] and text.splitlines()[1].rstrip().endswith("CPU 3 %, memory 51 %")
