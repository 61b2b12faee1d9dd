"""One host per home: an OS file lock that dies with its process.

A SIGKILLed host leaves no stale lock behind: the OS drops the lock with the
process, so the next host starts without anyone deleting a file by hand.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO

from cadre_desktop.errors import HostBusy, StorageError
from cadre_desktop.files.readfile import open_regular, read_bytes


class HostLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None

    def holder_pid(self) -> int | None:
        try:
            text = read_bytes(self.path, max_bytes=64, follow_symlinks=False).decode("ascii").strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    @property
    def held(self) -> bool:
        return self._fh is not None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = open_regular(self.path, follow_symlinks=False, flags=os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise StorageError(f"cannot use the lock file {self.path}: {exc.strerror or exc}") from None
        fh = os.fdopen(fd, "r+")
        try:
            _lock(fh)
        except OSError:
            fh.close()
            pid = self.holder_pid()
            who = f" (pid {pid})" if pid else ""
            raise HostBusy(
                f"Another cadre-desktop host{who} is already running for {self.path.parent}. "
                "Use that one, or stop it first."
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            try:
                self._fh.seek(0)
                self._fh.truncate()
                _unlock(self._fh)
            finally:
                self._fh.close()
                self._fh = None


if sys.platform == "win32":  # pragma: no cover - exercised on Windows
    import msvcrt

    def _lock(fh: IO[str]) -> None:
        fh.seek(0)
        msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)

    def _unlock(fh: IO[str]) -> None:
        fh.seek(0)
        msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _lock(fh: IO[str]) -> None:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock(fh: IO[str]) -> None:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
