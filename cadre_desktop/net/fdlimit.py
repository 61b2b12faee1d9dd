"""File descriptors: use what the OS allows, and keep a few for the work that must not fail.

Linux and macOS give a process a soft limit on open descriptors (often 1,024)
below a hard limit it may raise itself to; `raise_soft_limit` does that at
start, for the host and for each node. Windows has no such limit (its C
runtime's is not what sockets use): nothing to do there.

A flood of connections can still take every descriptor a moment before the
servers' caps (see `netguard`) shut it out. The reserve holds a few spare
descriptors; an operation that must not fail for want of one (saving a file,
starting a node) that meets EMFILE frees the reserve, tries once more, and
takes the reserve back afterwards.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

#: macOS refuses a soft limit above OPEN_MAX (10240) even when the hard limit is "unlimited".
_DARWIN_CAP = 10240
#: With an unlimited hard limit elsewhere, this is plenty for a household host.
_UNLIMITED_CAP = 65536
RESERVE = 8


def raise_soft_limit(platform: str = sys.platform, resource_module: Any = None) -> tuple[int, int] | None:
    """Raise RLIMIT_NOFILE's soft limit to the hard one; (old, new), or None where there is none."""
    if platform == "win32":
        return None
    if resource_module is None:
        try:
            import resource as resource_module
        except ImportError:
            return None
    soft, hard = resource_module.getrlimit(resource_module.RLIMIT_NOFILE)
    target = hard
    if hard == resource_module.RLIM_INFINITY or hard < 0:
        target = _UNLIMITED_CAP
    if platform == "darwin":
        target = min(target, _DARWIN_CAP)
    if soft != resource_module.RLIM_INFINITY and 0 <= soft < target:
        try:
            resource_module.setrlimit(resource_module.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.debug("could not raise the descriptor limit from %s to %s: %s", soft, target, exc)
            return soft, soft
        return soft, target
    return soft, soft


class Reserve:
    """A few spare descriptors, freed for one retry of an operation that hit EMFILE."""

    def __init__(self, count: int = RESERVE) -> None:
        self.count = count
        self._fds: list[int] = []
        self._lock = threading.Lock()
        self.fill()

    def fill(self) -> None:
        with self._lock:
            while len(self._fds) < self.count:
                try:
                    self._fds.append(os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
                except OSError:
                    return

    def free(self) -> None:
        with self._lock:
            while self._fds:
                os.close(self._fds.pop())

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except OSError as exc:
            if not is_shortage(exc):
                raise
            log.warning("out of file descriptors; using the reserve to finish")
            self.free()
            try:
                return fn(*args, **kwargs)
            finally:
                self.fill()

    def close(self) -> None:
        self.free()


def is_shortage(exc: BaseException) -> bool:
    """Whether `exc` says this process (EMFILE) or the whole system (ENFILE) is out of descriptors."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def shortage_words(doing: str) -> str:
    """What to tell a person when `doing` failed for want of a descriptor."""
    return (f"{doing} failed: the host has no file descriptor left (too many open files or connections). "
            "This is the computer's trouble, not a busy port or the node's; it is tried again by itself. "
            "If it lasts, look for a program holding many connections to the host, or raise the "
            "open-files limit ('ulimit -n').")


_reserve: Reserve | None = None


def reserve() -> Reserve | None:
    """The process's reserve, once `keep_reserve` made one."""
    return _reserve


def keep_reserve(count: int = RESERVE) -> Reserve:
    """Set aside `count` descriptors for this process (idempotent)."""
    global _reserve
    if _reserve is None:
        _reserve = Reserve(count)
    return _reserve


def call_with_reserve(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args)`, retried once on EMFILE with the reserve freed (if the process keeps one)."""
    spare = _reserve
    if spare is None:
        return fn(*args, **kwargs)
    return spare.call(fn, *args, **kwargs)
