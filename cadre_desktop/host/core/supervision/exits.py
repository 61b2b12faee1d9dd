"""What the supervisor knows of each node's last exit, until the node's next start.

The words ("exited with code 3: <its last line>", "never answered within 15 s")
explain a node that is down, become the next start mark's `last_exit`, and
give a give-up its reason; the code decides whether retrying can help.
The node's own lines come from its log, secrets redacted, one line each. An exit
with code 0 may carry the node's own request, its run.json (`runfile.py`), read
here at the exit and kept with the words for the pass (whether its kind can be
held so is `decide()`'s to say).

The line quoted is the node's last *error* line of this run, not its last line:
a node killed while answering probes ends its log with routine lines (an HTTP
access line, an INFO line) that say nothing of why it stopped. `reason_line`
picks, among the run's last lines, the last that looks like an error (an
ERROR/CRITICAL/FATAL level, a traceback's end, "cannot …"), else the last that
is not routine (a bare stderr line, a warning), else none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from cadre_desktop.host.core.clock import Clock, iso, stamp
from cadre_desktop.host.core.driver import Exit
from cadre_desktop.host.core.records.lifecycle import Supervised
from cadre_desktop.host.core.records.records import HeldBy, Hold
from cadre_desktop.host.core.supervision.decide import exit_words
from cadre_desktop.host.core.supervision.runfile import RunFiles
from cadre_desktop.text import one_line

#: How many of a node's last lines are searched for its reason.
REASON_SEARCH_LINES = 20
#: The host's own line at each start in a node's log (host/local/nodelogs.py writes it).
_HOST_LINE = re.compile(r"^--- cadre-desktop: ")
_ACCESS = re.compile(r'\b(?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) /\S*(?: HTTP/[\d.]+)?"? \d{3}\b')
_LEVEL = re.compile(r"\b(DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL)\b|\b(?i:level)=(\w+)")
_ROUTINE_LEVELS = frozenset({"debug", "info", "notice", "trace"})
_ERROR_LEVELS = frozenset({"error", "critical", "fatal", "panic"})
_ERROR_WORDS = re.compile(r"error|exception|fatal|panic|traceback|cannot|can't|failed|denied|refused", re.IGNORECASE)


def _kind(line: str) -> str:
    """"routine", "error" or "other": what a log line says about why a node stopped."""
    if not line.strip() or _HOST_LINE.match(line) or _ACCESS.search(line):
        return "routine"
    level = _LEVEL.search(line)
    name = (level.group(1) or level.group(2) or "").lower() if level else ""
    if name in _ROUTINE_LEVELS:
        return "routine"
    if name in _ERROR_LEVELS or (not name and _ERROR_WORDS.search(line)):
        return "error"
    return "other"


def reason_line(lines: list[str]) -> str | None:
    """The line of this run (after the host's last start line) that best says why it stopped."""
    run = lines
    for at in range(len(lines) - 1, -1, -1):
        if _HOST_LINE.match(lines[at]):
            run = lines[at + 1:]
            break
    kinds = [(_kind(line), line) for line in run]
    for wanted in ("error", "other"):
        found = [line for kind, line in kinds if kind == wanted]
        if found:
            return found[-1]
    return None


@dataclass(frozen=True)
class Request:
    """A hold a node asked for at the exit of one child, kept until a pass takes it."""

    handle_id: str
    #: The state it asked for by name ("paused", "sleeping", "done").
    state: str
    hold: Hold


class ExitBook:
    def __init__(self, log_tail: Callable[[str, int], list[str]], redact: Callable[[str, str], str], *,
                 run_files: RunFiles | None = None, clock: Clock | None = None) -> None:
        #: The node's last lines (`log_tail(node_id, count)`), and the redaction of its secrets.
        self._log_tail, self._redact = log_tail, redact
        #: Where each node's run.json is (None: this host reads none), and the clock its hold is dated by.
        self.run_files, self.clock = run_files, clock or Clock()
        self._words: dict[str, str] = {}
        self._codes: dict[str, int | None] = {}
        #: Per node, what it asked for (run.json) at the exit of its last child.
        self._requests: dict[str, Request] = {}
        #: Per dead child whose exit no event reported, the words read from its log.
        self._unseen: dict[str, str] = {}

    def seen(self, event: Exit) -> str:
        """A child ended on its own: its exit in words and its code, and with code 0 what the node
        asked for (its run.json), kept until the next start. A `cause` the driver knows (its memory
        cap killed it) is the words."""
        node_id, code = event.node_id, event.returncode
        words = self._words[node_id] = event.cause or self.from_log(node_id, code)
        self._codes[node_id] = code
        asked = self.run_files.read(node_id) if code == 0 and self.run_files is not None else None
        if asked is not None:
            hold = Hold(by=HeldBy.NODE, reason=asked.reason or f"the node asked to be {asked.state}",
                        at=stamp(self.clock), wake_at=iso(asked.wake_at) if asked.wake_at else None)
            self._requests[node_id] = Request(event.handle_id, asked.state, hold)
        return words

    def requested(self, record: Supervised) -> tuple[str, Hold] | None:
        """What the node asked for at the exit of the record's current child, if anything."""
        request = self._requests.get(record.id)
        if request is None or request.handle_id != record.handle:
            return None
        return request.state, request.hold

    def refused(self, node_id: str) -> None:
        """Its kind cannot be held as it asked (`decide()` said so): the request is dropped."""
        self._requests.pop(node_id, None)

    def from_log(self, node_id: str, code: int | None) -> str:
        """An exit in words: its code or signal, and the node's last error line."""
        line = reason_line(self._log_tail(node_id, REASON_SEARCH_LINES))
        return exit_words(code, one_line(self._redact(node_id, line)) if line else None)

    def with_log_tail(self, node_id: str, reason: str) -> str:
        """`reason`, then the node's last five log lines (what a give-up says)."""
        lines = self._log_tail(node_id, 5)
        if not lines:
            return reason
        return reason + "\nLast log lines:\n" + self._redact(node_id, "\n".join(one_line(x) for x in lines))

    def stopped(self, node_id: str, reason: str) -> None:
        """The host stopped a child for a reason of its own (it never answered, it hung)."""
        self._words[node_id] = reason
        self._codes.pop(node_id, None)

    def words(self, node_id: str) -> str | None:
        return self._words.get(node_id)

    def code(self, node_id: str, default: int | None = None) -> int | None:
        return self._codes.get(node_id, default)

    def unseen(self, node_id: str, handle_id: str, code: int | None) -> str:
        """The words of a child that died unseen (the host was down): read once per child."""
        words = self._unseen.get(handle_id)
        if words is None:
            words = self._unseen[handle_id] = self.from_log(node_id, code)
        return words

    def take_for_start(self, node_id: str, old_handle: str | None) -> str | None:
        """A start begins: the words it follows go into its mark, and the book is cleared."""
        self._unseen.pop(old_handle or "", None)
        self._codes.pop(node_id, None)
        return self._words.pop(node_id, None)

    def before_start(self, node_id: str) -> None:
        """A start (a first one too): no request of an earlier run may hold this one, its run.json removed."""
        self._requests.pop(node_id, None)
        if self.run_files is not None:
            self.run_files.clear(node_id)

    def forget(self, node_id: str) -> None:
        """A deliberate start or a release begins with a clean slate: the last exit explains
        nothing, and what the node asked for then is spent."""
        self._words.pop(node_id, None)
        self._codes.pop(node_id, None)
        self._requests.pop(node_id, None)
