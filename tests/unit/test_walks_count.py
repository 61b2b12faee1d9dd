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
