"""A child's end and its log, as the integration tests of the local driver read them."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil

from cadre_desktop.host.local.system.seam import for_this_os

THIS_OS = for_this_os()


def gone(pid: int) -> bool:
    """The process is no more (a reaped child, or a pid now someone else's start time)."""
    return THIS_OS.read_identity(pid) is None


def ended(pid: int) -> bool:
    """The process has ended: gone, or a zombie its parent has not reaped yet. A process reaped
    between two looks is ended too (asking psutil after `pid_exists` raced with the reaping)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read(path: Path) -> bytes:
    """A log being rotated is missing for an instant (between the rename and the new file)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def end(proc: subprocess.Popen[Any]) -> None:
    """Terminate a helper the test started, give it five seconds, then kill it (and reap it)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
