"""What the details pane says about one node: pure functions over a `NodeView`, no Qt.

Fields the engine adds over time (`last_exit`, `exit_code`, `waiting_for`,
`last_decision`) are read with defaults, so an older engine still gets words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.core.records.records import HELD, NodeStatus
from cadre_desktop.logs.logtail import tail_lines
from cadre_desktop.text import url_host
from cadre_desktop.times import parse_time
from cadre_desktop.ui.tray.status import Phase, PhaseWords, duration_words, exit_line, is_down, is_starting

LOG_BYTES_LINES = 400
_START = re.compile(r"^--- cadre-desktop: starting node \S+ at (\S+) ---$")
_STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+(.*)$")
_EXIT_CODE = re.compile(r"exit(?:ed with)? code (-?\d+)")
#: The host's own status probe, as a node's access log records it: noise in "last lines".
_PROBE = re.compile(r'"GET /status[ ?"]')


@dataclass(frozen=True)
class LogLine:
    #: When: the line's own timestamp, else the start of the run that wrote it.
    at: datetime | None
    text: str
    #: The same line this many times in a row (a crash loop says the same thing each time).
    count: int = 1


PANE_WORDS = PhaseWords(
    {Phase.GAVE_UP: "Stopped: the host gave up on it after it kept exiting",
     Phase.STARTING: "Starting: waiting for its first answer", Phase.UNCLAIMED: "Running, waiting to be claimed",
     Phase.JOINING: "Running, joining its cadre"},
    restarting_in="Down: restarting in {left} s (attempt {attempt})", restarting_now="Down: restarting now",
    joined="Running, joined the cadre {cadre}", joined_unnamed="Running, joined its cadre",
)


def state_words(v: NodeView, now: datetime) -> str:
    """The details pane's words for the node's phase (ui/tray/status.py): sentences."""
    waiting = getattr(v, "waiting_for", None)
    if waiting:
        return f"Waiting for the {waiting}: it starts by itself once that is available"
    return PANE_WORDS.say(v, now)


def reason_words(v: NodeView) -> str:
    exit_words = getattr(v, "last_exit", None)
    head = (v.last_error or "").partition("Last log lines:")[0].strip()
    if exit_words and exit_words not in head:  # a give-up reason already quotes the exit
        head = f"{head}\n{exit_words}" if head else exit_words
    return head or "—"


def exit_code(v: NodeView) -> int | None:
    code = getattr(v, "exit_code", None)
    if code is not None:
        return code
    found = _EXIT_CODE.search(" ".join(filter(None, (getattr(v, "last_exit", None), v.last_error))))
    return int(found[1]) if found else None


def when_words(stamp: str | None, now: datetime) -> str:
    at = parse_iso(stamp)
    if at is None:
        return ""
    ago = (now - at).total_seconds()
    local = at.astimezone().strftime("%H:%M:%S")
    return f"{local} ({duration_words(ago)} ago)" if ago >= 0 else local


def decision_words(v: NodeView, now: datetime) -> str:
    decision = getattr(v, "last_decision", None)
    if not isinstance(decision, dict) or not decision.get("decision"):
        return "—"
    words = str(decision["decision"])
    when = when_words(decision.get("at"), now)
    if when:
        words += f", at {when}"
    if decision.get("error"):
        words += f": {decision['error']}"
    return words


def address_words(v: NodeView) -> str:
    if not v.api_port:
        return "—"
    return f"{url_host(v.advertise_host)}:{v.api_port} (API), P2P port {v.p2p_port}"


def caps_words(v: NodeView) -> str:
    """What the node may use and how the OS holds it to that, for a person."""
    caps = v.caps
    if not caps:
        return "—"
    cpu, memory = caps.get("cpu_percent"), caps.get("memory_mb")
    parts = [f"CPU {cpu} % of a core" if cpu else "CPU not capped", f"memory {memory} MB" if memory else "memory not capped"]
    if caps.get("low_priority"):
        parts.append("low priority")
    how = str(caps.get("how") or "")
    return ", ".join(parts) + (f" ({how})" if caps.get("enforced", True) else f". Not enforced: {how}")


def next_step(v: NodeView) -> str:
    waiting = getattr(v, "waiting_for", None)
    if waiting == "keyring":
        return "Unlock your keyring (the login keyring); the node starts by itself once it is open."
    if v.status == NodeStatus.ERROR:
        said = " ".join(filter(None, (exit_line(v), v.last_error))).casefold()
        if "could not start the node program" in said or "no such file" in said and "node_command" in said:
            return "Check the node command in Preferences, then press Retry."
        if "address already in use" in said or "port" in said and "in use" in said:
            return "Another program uses its port: change the port range in Preferences, then press Retry."
        return "Read its last log lines below, fix what they name, then press Retry."
    if v.status in HELD:
        why = f" ({v.hold_reason})" if v.hold_reason else ""
        if v.status == NodeStatus.SLEEPING and v.wake_at:
            wake = parse_iso(v.wake_at)
            at = wake.astimezone().strftime("%H:%M") if wake else v.wake_at
            return f"It is asleep{why} and starts by itself at {at}; Resume starts it now."
        if getattr(v, "held_by", None) == "conditions":
            return (f"Its run conditions hold it{why}; it starts by itself when they allow (When to run, in "
                    "Preferences). Resume runs it now, until a condition changes.")
        return f"It is {v.status.value}{why}; Resume starts it now, without counting an attempt."
    if is_down(v):
        return "It restarts by itself; Restart tries at once without counting an attempt."
    if v.status == NodeStatus.UNCLAIMED:
        return "Show its QR code and scan it with your phone to claim it into your cadre."
    if v.status in (NodeStatus.SPAWNING, NodeStatus.JOINING) or is_starting(v):
        starting = getattr(v, "starting", None)
        return f"Nothing yet: it is on its way ({starting})." if starting else "Nothing yet: it is on its way."
    return "Nothing to do: it is running."


def log_lines(path: str | Path, count: int = 8) -> list[LogLine]:
    """The node's last `count` distinct log lines, each with a time, repeats folded, the host's
    own status probes left out."""
    try:
        data, _ = tail_lines(Path(path), LOG_BYTES_LINES)
    except OSError:
        return []
    lines: list[LogLine] = []
    started: datetime | None = None
    for raw in data.decode("utf-8", "replace").splitlines():
        raw = raw.rstrip()
        marker = _START.match(raw)
        if marker:
            started = parse_iso(marker[1])
            continue
        if not raw.strip() or _PROBE.search(raw):
            continue
        stamped = _STAMPED.match(raw)
        at, text = (_local_stamp(stamped[1]) or started, stamped[2]) if stamped else (started, raw)
        if lines and lines[-1].text == text:
            lines[-1] = LogLine(at or lines[-1].at, text, lines[-1].count + 1)
        else:
            lines.append(LogLine(at, text))
    return lines[-count:]


def _local_stamp(text: str) -> datetime | None:
    """A node's own timestamp; without a zone it is the machine's local time (Python logging's way)."""
    return parse_time(text, zone="local")


def log_words(lines: list[LogLine]) -> str:
    out = []
    for line in lines:
        when = line.at.astimezone().strftime("%H:%M:%S") if line.at else "--:--:--"
        times = f"  (×{line.count})" if line.count > 1 else ""
        out.append(f"{when}  {line.text}{times}")
    return "\n".join(out) or "(the log is empty)"
