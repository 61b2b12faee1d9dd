"""The reason quoted for an exit is the node's last error line of this run, not its last line."""

from __future__ import annotations

import pytest

from cadre_desktop.host.core.supervision.exits import ExitBook, reason_line

ACCESS = '2026-12-02T02:00:00 INFO node n1 cadre.node.access: 127.0.0.1 "GET /status" 200 0.6ms'
ERROR = "2026-12-02T02:00:00 ERROR node n1 cadre.node: cannot bind the P2P port 4001"


def book(lines: list[str]) -> ExitBook:
    return ExitBook(lambda node_id, count: lines[-count:], lambda node_id, text: text.replace("s3cret", "[redacted]"))


def test_an_access_line_after_the_error_is_never_the_reason():
    """Regression: "was killed by SIGKILL: … GET /status 200 0.6ms" quoted the last line."""
    words = book([ERROR, ACCESS, ACCESS]).from_log("n1", -9)
    assert words == f"was killed by SIGKILL: {ERROR}"


def test_only_routine_lines_give_no_line_at_all():
    assert book(["2026-12-02T02:00:00 INFO node n1 cadre.node: ready in 12 ms", ACCESS]).from_log("n1", -9) == (
        "was killed by SIGKILL")


@pytest.mark.parametrize(("lines", "expected"), [
    (["node exploded: bad config"], "node exploded: bad config"),  # a bare stderr line is said
    (["cadre-node: error: cannot open /dev/ttyUSB0", "WARNING disk almost full"],
     "cadre-node: error: cannot open /dev/ttyUSB0"),  # an error outranks a later warning
    (["WARNING disk almost full", ACCESS], "WARNING disk almost full"),
    (["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: boom"], "ValueError: boom"),
    (["ERROR an old run's failure", "--- cadre-desktop: starting node n1 at 2026-12-02T02:00:00Z ---", ACCESS], None),
    (['ts=1 level=info msg="GET /status 200"', 'ts=2 level=error msg="disk full"', 'ts=3 level=info msg="bye"'],
     'ts=2 level=error msg="disk full"'),
    ([], None),
])
def test_the_reason_line_is_the_runs_last_error_else_its_last_unroutine_line(lines, expected):
    assert reason_line(lines) == expected


def test_the_reason_is_redacted_and_one_line():
    words = book(["ERROR token s3cret\x1b[31m refused\r\nnext"]).from_log("n1", 1)
    assert words.startswith("exited with code 1: ERROR token [redacted]")
    assert "s3cret" not in words and "\x1b" not in words and "\n" not in words
