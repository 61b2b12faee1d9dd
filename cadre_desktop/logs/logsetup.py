"""How every host process starts its life: the log (stderr and a private, size-capped
host.log with repeats rate-limited) and the process limits. The tray app and the
headless host both call this, before the engine starts."""

from __future__ import annotations

import asyncio
import io
import logging
import logging.handlers
import os
import sys
import time

from cadre_desktop.logs import logfilter
from cadre_desktop.net import fdlimit
from cadre_desktop.paths import Paths

log = logging.getLogger("cadre_desktop")


#: A log the host cannot write (a full disk) is said on stderr at most this often.
NOTE_EVERY_S = 60.0


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """host.log and its rotations, 0600 from their creation (a rollover makes a new file,
    which the stock handler would create with the umask's mode).

    A record it cannot write (a full disk) is lost with one short note on stderr at
    most every NOTE_EVERY_S, never the stock "--- Logging error ---" traceback per record.
    """

    _noted_at: float | None = None
    #: Records lost since the last note.
    lost = 0

    def handleError(self, record: logging.LogRecord) -> None:
        self.lost += 1
        now = time.monotonic()
        if self._noted_at is not None and now - self._noted_at < NOTE_EVERY_S:
            return
        self._noted_at = now
        exc = sys.exc_info()[1]
        why = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__)[:200]
        try:
            sys.stderr.write(f"cadre-desktop: cannot write the host log {self.baseFilename}: {why}; "
                             f"{self.lost} line(s) lost (said at most once a minute)\n")
            sys.stderr.flush()
        except Exception:  # stderr itself gone: nothing left to tell
            pass
        self.lost = 0

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        if os.name == "posix":
            os.fchmod(fd, 0o600)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)


def setup_logging(paths: Paths, *, to_stderr: bool = True) -> None:
    """Plain lines to stderr and a size-capped host.log, repeats rate-limited. Never a secret in either."""
    root = logging.getLogger()
    if getattr(root, "_cadre_configured", False):
        return
    # A record a handler cannot write is dropped (host.log notes it, bounded): never a
    # traceback on stderr per record, as the stock handlers print on a full disk.
    logging.raiseExceptions = False
    root.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if to_stderr:
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(fmt)
        root.addHandler(err)
    try:
        paths.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fh = PrivateRotatingFileHandler(paths.host_log, maxBytes=1 << 20, backupCount=2, encoding="utf-8")
        fh.setFormatter(fmt)
        root.addHandler(fh)
    except OSError as exc:
        print(f"cadre-desktop: cannot write the host log: {exc}", file=sys.stderr)
    logfilter.install(list(root.handlers))
    root._cadre_configured = True  # type: ignore[attr-defined]


def prepare_process(loop: asyncio.AbstractEventLoop) -> None:
    """What a host process needs before it serves anything: every descriptor the OS
    allows, a few kept in reserve, and the loop's own errors as single lines."""
    limits = fdlimit.raise_soft_limit()
    if limits and limits[0] != limits[1]:
        log.info("raised the open-file limit from %d to %d", *limits)
    fdlimit.keep_reserve()
    logfilter.quiet_loop_errors(loop)
