"""A node's `run.json`: what it asks of its host as it exits with code 0 (docs/node-contract.md §7).

`{"state": "paused" | "sleeping" | "done", "wake_at": "<RFC 3339>" | null, "reason": "<one line>"}`
in the node's work folder. The host removes any old one before each start and
reads it only after an exit with code 0. The node wrote it, so it is hostile
until checked: a regular file only (never a symlink, a FIFO or a device), at
most `MAX_BYTES`, JSON of exactly that shape, the reason made one printable
line. Anything else is one warning, and the exit is an ordinary exit 0.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cadre_desktop.errors import NodeFault
from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.host.core.clock import parse_iso
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

NAME = "run.json"
MAX_BYTES = 4096
REASON_MAX = 200
STATES = ("paused", "sleeping", "done")


@dataclass(frozen=True)
class RunRequest:
    """What a node asked for: a hold state, when to wake (sleeping only), and why."""

    state: str
    wake_at: datetime | None
    reason: str


class BadRunFile(NodeFault):
    """A run.json that is not what the node contract says (the node's fault)."""

    code = "bad_run_file"


def parse(raw: bytes) -> RunRequest:
    """A run.json's bytes checked; anything but the contract's shape raises BadRunFile."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadRunFile("it is not JSON") from None
    if not isinstance(doc, dict):
        raise BadRunFile("it is not a JSON object")
    state = doc.get("state")
    if state not in STATES:
        raise BadRunFile(f"its state must be one of {', '.join(STATES)}")
    wake_raw = doc.get("wake_at")
    wake_at = None
    if wake_raw is not None:
        wake_at = parse_iso(wake_raw) if isinstance(wake_raw, str) and len(wake_raw) <= 64 else None
        if wake_at is None:
            raise BadRunFile("its wake_at is not an RFC 3339 time")
    reason = doc.get("reason", "")
    if reason is not None and not isinstance(reason, str):
        raise BadRunFile("its reason is not a string")
    return RunRequest(state=state, wake_at=wake_at if state == "sleeping" else None,
                      reason=one_line(reason or "", REASON_MAX))


class RunFiles:
    """Each node's run.json, in the folder `folder(node_id)` names."""

    def __init__(self, folder: Callable[[str], Path]) -> None:
        self.folder = folder

    def path(self, node_id: str) -> Path:
        return self.folder(node_id) / NAME

    def clear(self, node_id: str) -> None:
        """Before a start: no request of an earlier run may hold this one."""
        try:
            os.unlink(self.path(node_id))
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("node %s: could not remove its old %s: %s", node_id, NAME, exc.strerror or exc)

    def read(self, node_id: str) -> RunRequest | None:
        """After an exit 0: the node's request, or None (none, or one not taken, with one warning)."""
        path = self.path(node_id)
        if not os.path.lexists(path):
            return None
        try:
            return parse(read_bytes(path, max_bytes=MAX_BYTES, follow_symlinks=False))
        except OSError as exc:
            why = exc.strerror or str(exc)
        except BadRunFile as exc:
            why = str(exc)
        log.warning("node %s exited with code 0 and a %s that is not taken (%s); it is restarted as usual",
                    node_id, NAME, why)
        return None
