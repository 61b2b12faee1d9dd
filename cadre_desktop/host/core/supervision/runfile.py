"""A node's `run.json`: what it asks of its host as it exits with code 0 (docs/node-contract.md §7).

`{"state": "paused" | "sleeping" | "done", "wake_at": "<RFC 3339>" | null, "reason": "<one line>"}`
in the node's work folder. The host removes any old one before each start and
reads it only after an exit with code 0. The node wrote it, so it is hostile
until checked: a regular file only (never a symlink, a FIFO or a device), at
most `MAX_BYTES`, JSON of exactly that shape, the reason made one printable
line. Anything else is one warning, and the exit is an ordinary exit 0. The contract itself
(the name, the states, the bounds, the check of a document) is `wire/runfile.py`, the node's too;
this is the host's side of the file: where it is, its removal, its bounded read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.wire.runfile import MAX_BYTES, NAME, BadRunFile, RunRequest, parse

__all__ = ["MAX_BYTES", "NAME", "BadRunFile", "RunFiles", "RunRequest", "parse"]

log = logging.getLogger(__name__)


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
        except Exception as exc:  # a node's file costs at most its hold, never the exit's pass
            log.warning("node %s exited with code 0 and a %s that could not be read (%s); it is restarted as "
                        "usual", node_id, NAME, type(exc).__name__)
            return None
        log.warning("node %s exited with code 0 and a %s that is not taken (%s); it is restarted as usual",
                    node_id, NAME, why)
        return None
