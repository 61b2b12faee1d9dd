"""`cadre-desktop --headless`: the host without a window, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from cadre_desktop.errors import Bug, CadreError, HostBusy
from cadre_desktop.logs.logsetup import prepare_process, setup_logging
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings

log = logging.getLogger("cadre_desktop")


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
    except Bug:
        raise  # our bug, not words for a person: its traceback ends the process (exit code 1)
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
    from cadre_desktop.host.core.records.preflight import prepare_home

    try:
        prepare_home(paths)  # before the log: an unusable home is one message, not two
    except CadreError as exc:
        print(f"cadre-desktop: {exc.message}", file=sys.stderr)
        return 1
    setup_logging(paths)
    return asyncio.run(serve(paths, settings))
