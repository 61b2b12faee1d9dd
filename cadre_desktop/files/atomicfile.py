"""Crash-safe file writes.

A write goes to a temp file created 0600 beside the target, is fsynced,
`os.replace`d over the target, and then the folder is fsynced, so after a
crash at any instant the target is either the old file or the new one, whole.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

_POSIX = os.name == "posix"


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable. Windows has no directory fsync."""
    if not _POSIX:
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_private_dir(folder: Path, *, tighten: bool = False) -> None:
    """Make `folder` (0700) if missing; with `tighten`, also take group and other
    access away from one that exists and is ours (POSIX; an older build made 0755)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if tighten and _POSIX:
        st = folder.stat()
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.chmod(folder, 0o700)


def write_bytes_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace `path` with `data`; on any error the old file is left intact.

    Out of file descriptors (a flood on an API), it is tried once more with the
    process's reserve freed (see `fdlimit`): a save must not fail for that.
    """
    from cadre_desktop.net.fdlimit import call_with_reserve

    call_with_reserve(_write_bytes_atomic, path, data, mode)


def _write_bytes_atomic(path: Path, data: bytes, mode: int) -> None:
    folder = path.parent
    ensure_private_dir(folder)
    tmp = folder / f".{path.name}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if _POSIX:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(folder)


def write_json_atomic(path: Path, doc: Any, *, mode: int = 0o600, compact: bool = False) -> None:
    """Write `doc` as JSON, atomically. `compact` for files the host rewrites on its hot path
    (records, state): without an indent, json's C encoder does the work, several times faster
    than the indenting Python one, which a storm of restarts of 100 nodes feels."""
    if compact:
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    else:
        text = json.dumps(doc, indent=2, sort_keys=True)
    write_bytes_atomic(path, (text + "\n").encode("utf-8"), mode=mode)
