"""The reference node's side of `run.json` (node contract §7): asked over its host-token API
(`POST /host/run`), it writes what it wants of its host into its work folder and exits with code 0.

The host removes any old `run.json` before each start and reads it only after an exit with
code 0: `{"state": "paused" | "sleeping" | "done", "wake_at": "<RFC 3339>" | null, "reason": "<one line>"}`.
Only the host's own token, from this machine, may ask (the tray and the tests ask a real node
to sleep this way); an owner token may not stop the node.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from cadre_desktop.errors import Invalid
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

NAME = "run.json"
STATES = ("paused", "sleeping", "done")
REASON_MAX = 200


def checked(body: dict[str, Any]) -> dict[str, Any]:
    """The run.json document a request body asks for; a field out of the contract raises Invalid (400)."""
    unknown = sorted(set(body) - {"state", "wake_at", "reason"})
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}")
    state = body.get("state")
    if state not in STATES:
        raise Invalid(f"state must be one of {', '.join(STATES)}")
    wake_at = body.get("wake_at")
    if wake_at is not None:
        if state != "sleeping":
            raise Invalid("wake_at is for state sleeping only")
        if not _is_rfc3339(wake_at):
            raise Invalid("wake_at must be an RFC 3339 time with its zone")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise Invalid(f"reason must be a string of at most {REASON_MAX} characters")
    return {"state": state, "wake_at": wake_at, "reason": one_line(reason, REASON_MAX)}


def _is_rfc3339(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


def write(node_dir: Path, doc: dict[str, Any]) -> None:
    """Written whole (0600), before the node stops: the host reads it after the exit."""
    write_json_atomic(node_dir / NAME, doc)
    log.info("asked the host to hold this node: %s%s", doc["state"],
             f" until {doc['wake_at']}" if doc.get("wake_at") else "")
