"""Reading a log like `tail`: its last lines, then what is appended.

The one reader of a log's end: the CLI's `node logs`, the host's log tail (the
window, a give-up's reason, `host/local/nodelogs.py`), the details pane and doctor
all read back from the end through `tail_lines`, block by block, so none of
them reads a whole log for its last lines. The CLI reads the file directly, so
`node logs` works with no host running. The host trims a log by copying it
aside and truncating it, or rotates it by renaming; a follower notices both
and starts again from the top.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from cadre_desktop.files.readfile import open_binary

FOLLOW_INTERVAL_S = 0.25


def tail_lines(path: Path, count: int, block: int = 8192, *, max_bytes: int | None = None,
               skip: bytes = b"") -> tuple[bytes, int]:
    """The last `count` lines of the file and the size they end at, reading back from the end.

    At most `max_bytes` are read (None: as far back as the lines need); where
    that bound cuts a line, the cut line is left out. Lines that start with
    `skip` are left out and not counted (the host's header lines).
    """
    with open_binary(path, follow_symlinks=False) as fh:
        end = fh.seek(0, os.SEEK_END)
        floor = 0 if max_bytes is None else max(0, end - max_bytes)
        pos, data = end, b""
        while pos > floor and _complete_lines(data, skip) <= count:
            step = min(block, pos - floor)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = data.splitlines(keepends=True)
    if pos > 0 and lines:
        lines = lines[1:]  # it may begin inside a line
    if skip:
        lines = [line for line in lines if not line.startswith(skip)]
    return b"".join(lines[-count:]) if count > 0 else b"", end


def _complete_lines(data: bytes, skip: bytes) -> int:
    if not skip:
        return data.count(b"\n")
    return sum(1 for line in data.split(b"\n")[1:] if not line.startswith(skip))


def last_lines(path: Path, count: int, *, max_bytes: int, skip: str = "") -> list[str]:
    """The last `count` lines as text (a bounded read from the end); [] for a log missing or unreadable."""
    try:
        data, _ = tail_lines(path, count, max_bytes=max_bytes, skip=skip.encode())
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()


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


def _still_there(fh: BinaryIO, seen: bytes) -> bool:
    pos = fh.tell()
    fh.seek(pos - len(seen))
    same: bool = fh.read(len(seen)) == seen
    fh.seek(pos)
    return same
