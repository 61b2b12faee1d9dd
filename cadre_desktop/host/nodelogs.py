"""A node child's log: the pump that writes it, its tail, and the legacy sweep.

Each child's stdout and stderr go into a pipe read by a log pump
(`cadre_desktop.logpump`), which keeps `logs/node-<id>.log` under its cap as
it writes and outlives the host as the node does. If the pump cannot be
started, the child writes into the file directly, as builds before the pump
did, and `trim` keeps that file near its cap once per sweep.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from cadre_desktop import logpump
from cadre_desktop.atomicfile import ensure_private_dir
from cadre_desktop.host import procs
from cadre_desktop.readfile import open_binary, open_regular

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


@dataclass
class Output:
    """Where a new child writes: `fd` for its stdout and stderr, and the pump behind it."""

    fd: int
    pump: subprocess.Popen | None


def _pump_env() -> dict[str, str]:
    # No CADRE_ variables: the pump is not a node process, and must not look like one.
    return {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}


def open_output(path: Path, node_id: str, cap: int, *, platform: str, job: str | None = None) -> Output:
    """A pipe into a fresh pump for the node's log, else the file itself (logged once)."""
    ensure_private_dir(path.parent)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, header(node_id))
        command = [*pump_command(), str(path), str(cap), *(["--job", job] if job else [])]
        pump = subprocess.Popen(
            command, stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True, env=_pump_env(), **procs.popen_options(platform),
        )
    except OSError as exc:
        os.close(write_end)
        log.warning("node %s: cannot start its log pump (%s); it writes its log directly",
                    node_id, exc.strerror or exc)
        return Output(open_direct(path, node_id, cap), None)
    finally:
        os.close(read_end)
    return Output(write_end, pump)


def open_direct(path: Path, node_id: str, cap: int) -> int:
    ensure_private_dir(path.parent)
    try:
        if path.stat().st_size > cap:
            os.replace(path, rotated(path))
    except FileNotFoundError:
        pass
    fd = open_regular(path, follow_symlinks=False, flags=os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, header(node_id))
    return fd


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
