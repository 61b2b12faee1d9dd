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

from cadre_desktop import fdlimit, logfilter
from cadre_desktop.paths import Paths

log = logging.getLogger("cadre_desktop")


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """host.log and its rotations, 0600 from their creation (a rollover makes a new file,
    which the stock handler would create with the umask's mode)."""

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
