"""A node child's log: the pump that writes it, its tail, and the sweep for older children.

Each child's stdout and stderr go into a pipe read by a log pump
(`cadre_desktop.logpump`), which keeps `logs/node-<id>.log` under its cap as
it writes and outlives the host as the node does. Children an older build
started write into the file directly; `trim` keeps those near the cap once
per sweep.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from cadre_desktop import logpump
from cadre_desktop.atomicfile import ensure_private_dir
from cadre_desktop.host import procs
from cadre_desktop.readfile import open_binary

log = logging.getLogger(__name__)

HEADER_PREFIX = "--- cadre-desktop:"


def pump_command() -> list[str]:
    """The pump as the host runs it: a bundle's own executable, or this Python on the file."""
    if getattr(sys, "frozen", False):
        return [sys.executable, logpump.FLAG]
    # -I: nothing from the environment or the user's site; -S: no site import at all
    # (the pump needs only the standard library), which also makes it start faster.
    return [sys.executable, "-I", "-S", logpump.__file__]


def header(node_id: str) -> bytes:
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return f"{HEADER_PREFIX} starting node {node_id} at {stamp} ---\n".encode()


def _pump_env() -> dict[str, str]:
    # No CADRE_ variables: the pump is not a node process, and must not look like one.
    return {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}


def start_pump(read_end: int, path: Path, cap: int, *, platform: str, job: str | None = None) -> subprocess.Popen:
    """A log pump reading `read_end` into `path` (in a session of its own, like the node)."""
    ensure_private_dir(path.parent)
    command = [*pump_command(), str(path), str(cap), *(["--job", job] if job else [])]
    return subprocess.Popen(
        command, stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True, env=_pump_env(), **procs.popen_options(platform),
    )


def rotated(path: Path) -> Path:
    return path.with_name(path.name + ".1")


def trim(path: Path, cap: int) -> None:
    """Keep a directly written log near its cap: the old part moves to `.1` (0600)."""
    try:
        if path.stat().st_size <= cap:
            return
        old = rotated(path)
        fd = os.open(old, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with open(fd, "wb") as out, open(path, "rb") as src:
            shutil.copyfileobj(src, out)
        if os.name == "posix":
            os.chmod(old, 0o600)
        # The child appends with O_APPEND, so it carries on at the new end.
        with open(path, "r+b") as fh:
            fh.truncate(0)
    except OSError:
        return


def tail(path: Path, lines: int, max_bytes: int) -> list[str]:
    """The last lines of a log (a bounded read from the end), without the host's header lines."""
    try:
        with open_binary(path, follow_symlinks=False) as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError:
        return []
    text = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and text:
        text = text[1:]  # the first line is probably cut
    return [line for line in text if not line.startswith(HEADER_PREFIX)][-lines:]


def delete(path: Path) -> None:
    """Delete a log and its rotation; one that cannot be deleted is logged, not raised."""
    for each in (path, rotated(path)):
        try:
            each.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not delete the log %s: %s", each, exc.strerror or exc)
