"""The reference node's side of `run.json` (node contract §7): asked over its host-token API
(`POST /host/run`), it writes what it wants of its host into its work folder and exits with code 0.

The host removes any old `run.json` before each start and reads it only after an exit with
code 0: `{"state": "paused" | "sleeping" | "done", "wake_at": "<RFC 3339>" | null, "reason": "<one line>"}`.
Only the host's own token, from this machine, may ask (the tray and the tests ask a real node
to sleep this way); an owner token may not stop the node. The contract (the name, the states,
the bounds, the strict check of a request, `checked`) is `wire/runfile.py`, the host's too.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.wire.runfile import NAME, RunDoc, checked

__all__ = ["NAME", "checked", "write"]

log = logging.getLogger(__name__)


def write(node_dir: Path, doc: RunDoc) -> None:
    """Written whole (0600), before the node stops: the host reads it after the exit."""
    write_json_atomic(node_dir / NAME, doc)
    log.info("asked the host to hold this node: %s%s", doc["state"],
             f" until {doc['wake_at']}" if doc.get("wake_at") else "")
