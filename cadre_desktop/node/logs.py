"""Plain log lines on stderr, with secrets scrubbed as a last line of defence, repeats rate-limited.

The code never logs a secret on purpose; the scrubber is for the accident (an
exception message that happens to quote one). It knows the claim secret and the
invitation from the environment, and any string registered with :func:`redact`.
"""

from __future__ import annotations

import logging
import sys
from collections import deque

from cadre_desktop.logs import logfilter

_secrets: deque[str] = deque(maxlen=64)


def redact(*values: str | None) -> None:
    """Never print these strings in any log line."""
    for value in values:
        if value and len(value) >= 8 and value not in _secrets:
            _secrets.append(value)


class _ScrubbingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        for value in _secrets:
            if value in line:
                line = line.replace(value, "[redacted]")
        return line


def setup_logging(node_id: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _ScrubbingFormatter(
            f"%(asctime)s %(levelname)s node {node_id} %(name)s: %(message)s",
            datefmt="%Y-%m-%dT%H:%M:%S",
        )
    )
    # Anyone who can reach the API can make lines (a request each): repeated ones are
    # rate-limited so a flood cannot fill the disk (cadre_desktop/logs/logfilter.py).
    logfilter.install([handler])
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
