"""`cadre-desktop --headless`: the host without a window, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import logging.handlers
import os
import signal
import sys

from cadre_desktop import fdlimit, logfilter
from cadre_desktop.errors import CadreError, HostBusy
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings

log = logging.getLogger("cadre_desktop")


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """host.log and its rotations, 0600 from their creation (a rollover makes a new file,
    which the stock handler would create with the umask's mode)."""

    def _open(self):
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


async def serve(paths: Paths, settings: Settings) -> int:
    from cadre_desktop.host.host import Host

    host = Host(paths, settings)
    # Handlers go in before start(): control.json appears during start(), and a
    # SIGTERM sent the moment it does must still stop the host cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    prepare_process(loop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, AttributeError, ValueError):  # Windows
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop.set))
    try:
        await host.start()
    except HostBusy as exc:
        print(f"cadre-desktop: {exc.message}", file=sys.stderr)
        return 3
    except CadreError as exc:
        print(f"cadre-desktop: {exc.message}", file=sys.stderr)
        return 1
    if hasattr(signal, "SIGHUP"):
        # SIGHUP: look at the network now (a changed address is acted on at once).
        loop.add_signal_handler(signal.SIGHUP, host.refresh)
    log.info("headless host running; SIGINT or SIGTERM stops it, SIGHUP re-checks the address")
    await stop.wait()
    log.info("stopping")
    await host.stop()
    return 0


def run_headless(paths: Paths, settings: Settings) -> int:
    from cadre_desktop.host.preflight import prepare_home

    try:
        prepare_home(paths)  # before the log: an unusable home is one message, not two
    except CadreError as exc:
        print(f"cadre-desktop: {exc.message}", file=sys.stderr)
        return 1
    setup_logging(paths)
    return asyncio.run(serve(paths, settings))
