"""Text from outside (the network, a file, another program) made safe before we keep or show it.

One check for node and host alike: a string is *clean* when it is text,
single-line, printable and bounded. `clean` returns it or None; `escape` turns
anything into a clean string by writing each unprintable character as a
visible escape (`\\x1b`, `\\u202e`), so a name a hostile node sent can be
shown without letting it drive the terminal (ESC, BEL, CSI sequences) or
reorder what is around it (bidi controls). Standard library only: the node
imports it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

#: A host name's characters (RFC 1123: letters, digits, hyphens, dots; a letter or digit first).
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")


def clean(value: Any, max_len: int, *, allow_empty: bool = False) -> str | None:
    """`value` if it is a printable single-line string of at most `max_len` characters, else None."""
    if not isinstance(value, str) or len(value) > max_len:
        return None
    if not value and not allow_empty:
        return None
    return value if value.isprintable() else None


def is_host(value: Any) -> bool:
    """Whether `value` is an IP address or a host name (labels of 1 to 63 characters, 253 in
    all, one trailing dot allowed). The one rule for an address a node listens on or
    advertises: the host checks its settings with it, the node its environment, so the
    host never accepts an address its node would refuse."""
    if not isinstance(value, str) or not value or len(value) > 253:
        return False
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    name = value[:-1] if value.endswith(".") else value
    return _HOST_NAME.fullmatch(name) is not None and all(0 < len(label) < 64 for label in name.split("."))


def url_host(host: str) -> str:
    """A host as a URL or a Host header writes it: an IPv6 literal in brackets. The one
    place for that rule (the engine's, the node's and the UI's addresses all use it)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _visible(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape(value: Any, max_len: int | None = None, *, keep: str = "") -> str:
    """A printable rendering of `value`: unprintable characters (except those in `keep`) as escapes.

    Backslashes are left as they are (this is for reading, not for parsing
    back), so paths keep their look. With `max_len`, the result is cut to that
    many characters and marked with an ellipsis.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable() and not keep:
        out = text
    else:
        out = "".join(ch if ch.isprintable() or ch in keep else _visible(ch) for ch in text)
    if max_len is not None and len(out) > max_len:
        out = out[: max(0, max_len - 1)] + "…"
    return out


def escape_lines(value: Any) -> str:
    """For a terminal: every line made printable, the line breaks (and tabs) kept."""
    text = value if isinstance(value, str) else str(value)
    return escape(text.replace("\r\n", "\n"), keep="\n\t")


def one_line(value: Any, limit: int = 200) -> str:
    """A line from a log or a node, to quote inside a sentence: unprintable characters and
    runs of spaces become one space, bounded with an ellipsis. (`escape` shows what was
    there; this drops it, which reads better in a notification or a give-up reason.)"""
    text = value if isinstance(value, str) else str(value)
    cleaned = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


#: A node's log as the control API and the fleet link answer it: its last lines, each and all bounded.
LOG_LINES = 200
LOG_LINE_CHARS = 2000
LOG_TOTAL_CHARS = 256 * 1024


def log_lines(value: Any, max_lines: int = LOG_LINES, *, line_chars: int = LOG_LINE_CHARS,
              total_chars: int = LOG_TOTAL_CHARS) -> list[str]:
    """Lines of a log (ours or another computer's answer: hostile either way) made fit to show: the last
    `max_lines` strings of a list (anything else dropped), each printable (escapes) and cut at
    `line_chars`, and at most `total_chars` in all (the oldest dropped first)."""
    if not isinstance(value, list):
        return []
    kept: list[str] = []
    total = 0
    for line in reversed(value[-max_lines:]):
        if not isinstance(line, str):
            continue
        shown = escape(line[: line_chars * 4].rstrip("\r\n"), line_chars, keep="\t")
        total += len(shown) + 1
        if total > total_chars:
            break
        kept.append(shown)
    kept.reverse()
    return kept
