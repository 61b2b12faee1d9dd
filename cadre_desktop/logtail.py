"""Reading a node's log like `tail`: its last lines, then what is appended.

The CLI reads the log file directly, so this works with no host running. The
host trims a log by copying it aside and truncating it, or rotates it by
renaming; a follower notices both and starts again from the top.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from cadre_desktop.readfile import open_binary

FOLLOW_INTERVAL_S = 0.25


def tail_lines(path: Path, count: int, block: int = 8192) -> tuple[bytes, int]:
    """The last `count` lines of the file and the size they end at, reading from the end."""
    with open_binary(path, follow_symlinks=False) as fh:
        end = fh.seek(0, os.SEEK_END)
        pos, data = end, b""
        while pos > 0 and data.count(b"\n") <= count:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-count:]) if count > 0 else b"", end


def follow(path: Path, offset: int, write: Callable[[bytes], None], interval: float = FOLLOW_INTERVAL_S) -> None:
    """Hand what is appended to `write`, until interrupted (Ctrl-C).

    A log replaced (renamed away) or truncated by the host is read again from
    its start. Truncation is told by the size dropping below what was read, or,
    when the file grew back past that point between two polls, by the last
    bytes read no longer being where they were.
    """
    fh = open_binary(path, follow_symlinks=False)
    try:
        fh.seek(max(0, offset - 64))
        seen = fh.read(offset - fh.tell())
        while True:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_ino != os.fstat(fh.fileno()).st_ino:
                fh.close()
                fh, seen = open_binary(path, follow_symlinks=False), b""
            elif st is not None and (st.st_size < fh.tell() or not _still_there(fh, seen)):
                fh.seek(0)
                seen = b""
            chunk = fh.read()
            if chunk:
                write(chunk)
                seen = (seen + chunk)[-64:]
            else:
                time.sleep(interval)
    finally:
        fh.close()


def _still_there(fh, seen: bytes) -> bool:
    pos = fh.tell()
    fh.seek(pos - len(seen))
    same = fh.read(len(seen)) == seen
    fh.seek(pos)
    return same
