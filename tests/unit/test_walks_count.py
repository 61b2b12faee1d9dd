"""bench/walks.py's counting (issue 34's walks): distinct functions, distinct files, and returns
to a file already left, of a sequence of calls given as (file, function)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def walks():
    """bench/walks.py, loaded as the tool runs it (bench/ first on the path, for its `_walk_trace`)."""
    spec = importlib.util.spec_from_file_location("bench_walks", BENCH / "walks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))
        del sys.modules[spec.name]


def test_going_back_to_a_file_left_counts_one_return(walks):
    counts = walks.count([("a.py", "f"), ("b.py", "g"), ("a.py", "h")])
    assert counts.returns == 1
    assert counts.reentries == {"a.py": 1}
    assert len(counts.functions) == 3 and counts.files == ["a.py", "b.py"]


def test_a_walk_that_never_turns_back_has_no_return(walks):
    counts = walks.count([("a.py", "f"), ("b.py", "g"), ("c.py", "h")])
    assert counts.returns == 0 and counts.reentries == {}
    assert counts.files == ["a.py", "b.py", "c.py"]


def test_calls_within_one_file_are_no_return_and_a_function_is_counted_once(walks):
    counts = walks.count([("a.py", "f"), ("a.py", "g"), ("a.py", "f"), ("b.py", "h"), ("b.py", "h")])
    assert counts.returns == 0
    assert counts.functions == [("a.py", "f"), ("a.py", "g"), ("b.py", "h")]
    assert counts.files == ["a.py", "b.py"]


def test_every_return_is_counted_and_said_per_file(walks):
    # a > b > a > b > c > a: back to a twice, to b once.
    steps = [("a.py", "f"), ("b.py", "g"), ("a.py", "f"), ("b.py", "k"), ("c.py", "h"), ("a.py", "m")]
    counts = walks.count(steps)
    assert counts.returns == 3
    assert counts.reentries == {"a.py": 2, "b.py": 1}
    assert [fn for _, fn in counts.functions] == ["f", "g", "k", "h", "m"]


def test_the_same_name_in_two_files_is_two_functions(walks):
    counts = walks.count([("a.py", "run"), ("b.py", "run")])
    assert len(counts.functions) == 2 and counts.returns == 0


def test_an_empty_walk_counts_nothing(walks):
    counts = walks.count([])
    assert (counts.functions, counts.files, counts.returns) == ([], [], 0)


def test_the_file_walk_says_each_run_of_one_file_once(walks):
    assert walks.file_walk([("a.py", "f"), ("a.py", "g"), ("b.py", "h"), ("a.py", "f")]) == ["a.py", "b.py", "a.py"]


# -- the reader's walk: the causal path to the end marker and what each call on it calls itself ----

def _tree(walks, *rows):
    """Calls from rows (function, file, entered, returned, parent, hop, hop_at, hop_exact), indexed in order."""
    calls = []
    for i, (fn, file, entered, returned, parent, hop, hop_at, exact) in enumerate(rows):
        calls.append(walks.Call(i, file, fn, entered, parent=parent, hop=hop, hop_at=hop_at, hop_exact=exact,
                                returned=returned))
    return calls


def _names(calls):
    return [c.function for c in calls]


def _crash_like(walks):
    # on_exit -> note (-> log_tail, a grandchild) ; on_exit -> after_exit -> spawn, which makes a task
    # at 9; the task: run -> carry_out -> start (the end, entered at 14). late: called by on_exit after
    # the path went on; stuck: called by after_exit, never back before spawn; made: a task made by
    # carry_out, back before start; inherited: a callback whose hop came through a context.
    return _tree(
        walks,
        ("on_exit", "sup.py", 0, 20, None, None, None, False),     # 0
        ("note", "sup.py", 1, 4, 0, None, None, False),            # 1
        ("log_tail", "orch.py", 2, 3, 1, None, None, False),       # 2
        ("after_exit", "passes.py", 5, 19, 0, None, None, False),  # 3
        ("stuck", "passes.py", 6, None, 3, None, None, False),     # 4
        ("spawn", "passes.py", 7, 10, 3, None, None, False),       # 5
        ("check", "gate.py", 8, 8.5, 5, None, None, False),        # 6
        ("late", "sup.py", 21, 22, 0, None, None, False),          # 7
        ("run", "passes.py", 11, None, None, 5, 9, True),          # 8
        ("carry_out", "sup.py", 12, None, 8, None, None, False),   # 9
        ("made", "sup.py", 12.5, 12.7, None, 9, 12.2, True),       # 10
        ("inherited", "sup.py", 12.8, 12.9, None, 9, 12.3, False),  # 11
        ("start", "orch.py", 14, None, 9, None, None, False),      # 12
    )


def test_the_causal_path_goes_back_through_the_task_to_the_call_that_made_it(walks):
    calls = _crash_like(walks)
    assert _names(walks.causal_path(calls, 12)) == ["on_exit", "after_exit", "spawn", "run", "carry_out", "start"]


def test_the_reader_walk_adds_only_direct_callees_back_before_the_path_went_on(walks):
    calls = _crash_like(walks)
    path, walk = walks.reader_walk(calls, 12, 30)
    assert _names(path) == ["on_exit", "after_exit", "spawn", "run", "carry_out", "start"]
    # note and check: called directly and back in time; made: a task carry_out made itself.
    # Not: log_tail (two levels down), stuck (never back), late (after the path went on),
    # inherited (its hop was not made by carry_out's own frame).
    assert _names(walk) == ["on_exit", "note", "after_exit", "spawn", "check", "run", "carry_out", "made", "start"]


def test_a_callee_of_the_frame_that_made_the_task_counts_only_before_the_task_was_made(walks):
    calls = _crash_like(walks)
    calls[6].entered, calls[6].returned = 9.5, 9.7  # spawn's check, after the task was made at 9
    _, walk = walks.reader_walk(calls, 12, 30)
    assert "check" not in _names(walk)


def test_a_walk_ending_at_a_return_counts_the_end_calls_callees_up_to_the_end(walks):
    calls = _tree(
        walks,
        ("pause", "ctl.py", 0, None, None, None, None, False),  # 0
        ("stop", "orch.py", 1, 6, 0, None, None, False),        # 1: the end, at its return
        ("terminate", "orch.py", 2, 3, 1, None, None, False),   # 2
        ("signal", "procs.py", 2.5, 2.7, 2, None, None, False),  # 3: terminate's, not stop's
        ("finish", "orch.py", 4, 5, 1, None, None, False),      # 4
        ("after", "orch.py", 7, 8, 1, None, None, False),       # 5: after the walk ended
    )
    _, walk = walks.reader_walk(calls, 1, 6.5)
    assert _names(walk) == ["pause", "stop", "terminate", "finish"]


def test_the_reader_walk_is_counted_in_call_order_with_its_returns(walks):
    root = str(walks.ROOT / "cadre_desktop")
    calls = _crash_like(walks)
    for c in calls:
        c.file = f"{root}/{c.file}"
    rec = walks.Recording("crash", steps=[(c.file, c.function) for c in calls], calls=calls, end_call=12,
                          end_clock=30)
    reader = walks.reader_figures("crash", rec)
    # sup > passes > gate > passes > sup > orch: back to passes once and to sup once.
    assert (reader["functions"], reader["files"], reader["returns"]) == (9, 4, 2)
    assert reader["reentries"] == {"passes.py": 1, "sup.py": 1}
    assert reader["reaches_start"] and reader["path_files"] == 3
    assert reader["sequence"][:2] == ["> cadre_desktop.sup:on_exit", "  cadre_desktop.sup:note"]
    assert reader["met"] is True


def test_a_path_that_loses_its_hop_says_it_does_not_reach_the_start(walks):
    calls = _crash_like(walks)
    calls[8].hop = calls[8].hop_at = None  # the task's maker not known
    rec = walks.Recording("crash", calls=calls, end_call=12, end_clock=30)
    reader = walks.reader_figures("crash", rec)
    assert reader["reaches_start"] is False
    assert reader["path"][0].endswith(":run")
