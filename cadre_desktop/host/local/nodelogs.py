"""A node child's log: the pump that writes it, its tail, its trim and its deletion.

Where a node's log is (`logs/node-<id>.log`) is `Paths.node_log`'s to say;
everything the engine does with one goes through `NodeLogs` here. Each child's
stdout and stderr go into a pipe read by the home's log keeper (`keeper.py`,
`cadre_desktop.logs.logkeeper`) or, on Windows, a log pump of its own
(`cadre_desktop.logs.logpump`); both keep the log under its cap as they write and
outlive the host as the node does. Children an older build started write into
the file directly; `trim` keeps those near the cap once per sweep.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from cadre_desktop.files.atomicfile import ensure_private_dir
from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.logs import logpump, logtail
from cadre_desktop.paths import Paths

log = logging.getLogger(__name__)

HEADER_PREFIX = "--- cadre-desktop:"
#: A node's log is kept under this size (its pump rotates it to `.1`).
LOG_CAP_BYTES = 1 << 20


def pump_command() -> list[str]:
    """The pump as the host runs it: a bundle's own executable, or this Python on the file."""
    if getattr(sys, "frozen", False):
        return [sys.executable, logpump.FLAG]
    # -I: nothing from the environment or the user's site; -S: no site import at all
    # (the pump needs only the standard library), which also makes it start faster.
    return [sys.executable, "-I", "-S", logpump.__file__]


def header(node_id: str) -> bytes:
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    return f"{HEADER_PREFIX} starting node {node_id} at {stamp} ---\n".encode()


def start_pump(read_end: int, path: Path, cap: int, *, system: ProcessOS,
               job: str | None = None) -> subprocess.Popen[bytes]:
    """A log pump reading `read_end` into `path` (in a session of its own, like the node).

    No `CADRE_` variables: the pump is not a node process, and must not look like one.
    """
    ensure_private_dir(path.parent)
    command = [*pump_command(), str(path), str(cap), *(["--job", job] if job else [])]
    return system.spawn(command, env=procs.without_node_vars(os.environ), cwd=None, stdin=read_end,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class NodeLogs:
    """The logs of one home's nodes."""

    def __init__(self, paths: Paths, cap: int = LOG_CAP_BYTES) -> None:
        self.paths = paths
        self.cap = cap

    def path(self, node_id: str) -> Path:
        return self.paths.node_log(node_id)

    def tail(self, node_id: str, lines: int, max_bytes: int) -> list[str]:
        """The last lines of the node's log (a bounded read from the end), without the host's header lines."""
        return logtail.last_lines(self.path(node_id), lines, max_bytes=max_bytes, skip=HEADER_PREFIX)

    def note(self, node_id: str, text: str) -> None:
        """Add one line of the host's own to the node's log (under its cap, as a pump writes)."""
        line = f"{HEADER_PREFIX} {datetime.now(UTC).isoformat(timespec='seconds')} {text} ---\n"
        try:
            capped = logpump.CappedLog(str(self.path(node_id)), self.cap)
            try:
                capped.write(line.encode())
            finally:
                capped.close()
        except OSError as exc:
            log.warning("could not write to the log of node %s: %s", node_id, exc.strerror or exc)

    def trim(self, node_id: str) -> None:
        """Keep a directly written log near its cap: the old part moves to `.1` (0600)."""
        path = self.path(node_id)
        try:
            if path.stat().st_size <= self.cap:
                return
            old = rotated(path)
            fd = os.open(old, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with open(fd, "wb") as out, open(path, "rb") as src:
                shutil.copyfileobj(src, out)
            os.chmod(old, 0o600)  # it may have been there with another mode (a no-op on Windows)
            # The child appends with O_APPEND, so it carries on at the new end.
            with open(path, "r+b") as fh:
                fh.truncate(0)
        except OSError:
            return

    def delete(self, node_id: str) -> None:
        """Delete the log and its rotation; one that cannot be deleted is logged, not raised."""
        path = self.path(node_id)
        for each in (path, rotated(path)):
            try:
                each.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete the log %s: %s", each, exc.strerror or exc)


def rotated(path: Path) -> Path:
    return path.with_name(path.name + ".1")
