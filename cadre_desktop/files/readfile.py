"""Reading a file cadre-desktop keeps: a regular file only, never blocking, never unbounded.

A plain `read_bytes()` on a FIFO waits for a writer forever (and a host blocked
in that open() ignores SIGTERM), on `/dev/zero` it reads until memory runs
out, and on a folder it raises something no message was written for. Every
file the host, the CLI and the node read goes through `read_bytes` here: it
opens without blocking (O_NONBLOCK), optionally refuses a symbolic link
(O_NOFOLLOW, for files only cadre-desktop writes), checks that what it opened
is a regular file, and reads at most `max_bytes`. Each refusal is an OSError
whose `strerror` reads well after "cannot read <file>: ".
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from cadre_desktop.errors import MachineError

_KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


class _Refusal(MachineError, OSError):
    """A file refused before it is read. An OSError too: every reader already handles those
    (`errno`, `strerror`), and a refusal must read like the OS's own reasons."""

    def __init__(self, error_number: int, strerror: str) -> None:
        super().__init__(strerror)  # the tree's message
        OSError.__init__(self, error_number, strerror)  # then errno and strerror, as the OS gives them


class NotAFile(_Refusal):
    """Something other than a regular file is where a file belongs."""

    code = "not_a_file"


class TooLarge(_Refusal):
    """The file is far larger than any file of this kind can be."""

    code = "file_too_large"


def kind_of(mode: int) -> str:
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def _size_words(limit: int) -> str:
    return f"{limit // (1 << 20)} MiB" if limit >= 1 << 20 else f"{limit // 1024} KiB" if limit >= 1024 else f"{limit} bytes"


def open_regular(path: Path, *, follow_symlinks: bool = True, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """An open descriptor on `path`, checked to be a regular file; never blocks on a FIFO."""
    flags |= getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, mode)
    except IsADirectoryError:
        raise NotAFile(errno.EISDIR, "it is a folder, not a file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise NotAFile(errno.ELOOP, "it is a symbolic link; cadre-desktop keeps this file as a plain file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(errno.EINVAL, f"it is {kind_of(st.st_mode)}, not a file")
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # a regular file never blocks; later writes expect blocking
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_binary(path: Path, *, follow_symlinks: bool = True) -> BinaryIO:
    """A file object for reading `path`, checked to be a regular file (logs are read in pieces)."""
    return os.fdopen(open_regular(path, follow_symlinks=follow_symlinks), "rb")


def read_bytes(path: Path, *, max_bytes: int, follow_symlinks: bool = True) -> bytes:
    """The whole file, if it is a regular file of at most `max_bytes`."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        if os.fstat(fd).st_size > max_bytes:
            raise TooLarge(errno.EFBIG, f"it is larger than {_size_words(max_bytes)}; is it the right file?")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:  # it grew while we read
            raise TooLarge(errno.EFBIG, f"it is larger than {_size_words(max_bytes)}; is it the right file?")
        return b"".join(chunks)
    finally:
        os.close(fd)
