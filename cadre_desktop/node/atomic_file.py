"""Private files written whole or not at all.

A crash or SIGKILL in the middle of a write must leave either the old file or the
new one, never a torn mix: the temp file is created 0600 beside the target, synced,
renamed over it, and then the folder is synced so the rename itself is durable.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_private_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, readable by its owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    # Not possible on Windows (a folder cannot be opened); the rename is still atomic.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
