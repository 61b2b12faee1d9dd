"""Warm starts: one node program kept loaded in standby, handed to the next start.

A node program that supports it (docs/node-contract.md, "Standby") is started
ahead with `CADRE_STANDBY=1` and nothing else of a node: it loads its code,
then waits on stdin. When a node needs starting, the orchestrator takes the
standby, writes the node's `CADRE_` variables (secrets included) to its stdin
as one JSON line, gives its output pipe to the node's log pump, and tracks it
as the node's child; a new standby is started in the background. So a respawn
costs the node's own set-up (identity, state, binding), not loading Python and
its libraries.

What never happens: a standby answering as a node (it has no identity and no
port until told), a secret on a command line or in the standby's environment
(the pipe only), a standby counted against any node. One that dies is replaced
quietly after a pause that doubles while they keep dying, and after a few
deaths in a row without a hand-over the program is taken to lack support and
started cold from then on. POSIX only: Windows children start cold.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cadre_desktop.fdlimit import call_with_reserve
from cadre_desktop.host.local import procs

log = logging.getLogger(__name__)

STANDBY_VAR = "CADRE_STANDBY"
#: Deaths in a row, none handed over, after which the program is started cold.
GIVE_UP_AFTER = 3
FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 60.0


@dataclass
class Standby:
    popen: subprocess.Popen[bytes]
    #: The read end of its output pipe (the pump gets it) and the write end (the header goes first).
    out_read: int
    out_write: int
    _cancel_watch: Callable[[], None] | None = field(default=None, repr=False)

    def close_fds(self) -> None:
        for fd in (self.out_read, self.out_write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.out_read = self.out_write = -1


class StandbyPool:
    """At most one standby of the node program, refilled in the background."""

    def __init__(self, command: list[str], cwd: Path, env: Callable[[], dict[str, str]], platform: str) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.base_env = env
        self.platform = platform
        self.enabled = platform != "win32"
        self._ready: Standby | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deaths = 0
        self._closed = False

    @property
    def ready(self) -> Standby | None:
        return self._ready

    # -- filling -----------------------------------------------------------------------

    def fill_soon(self, delay: float = 0.0) -> None:
        """Start a standby on a later loop turn (never inside the start that took the last one)."""
        if not self.enabled or self._closed or self._ready is not None or self._timer is not None:
            return
        self._timer = asyncio.get_running_loop().call_later(delay, self._fill)

    def _fill(self) -> None:
        self._timer = None
        if self._closed or self._ready is not None:
            return
        try:
            self._ready = self._start()
        except OSError as exc:
            log.warning("could not start a standby node program (%s); nodes start cold", exc.strerror or exc)
            self._died()

    def _start(self) -> Standby:
        env = procs.without_node_vars(self.base_env())
        env[STANDBY_VAR] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        out_read, out_write = call_with_reserve(os.pipe)
        try:
            self.cwd.mkdir(parents=True, exist_ok=True)
            popen = call_with_reserve(procs.spawn, self.command, env=env, cwd=self.cwd, stdin=subprocess.PIPE,
                                      stdout=out_write, stderr=out_write, platform=self.platform)
        except BaseException:
            os.close(out_read)
            os.close(out_write)
            raise
        standby = Standby(popen, out_read, out_write)
        standby._cancel_watch = procs.watch_exit(asyncio.get_running_loop(), popen.pid, popen,
                                                 lambda _code: self._on_exit(standby))
        return standby

    def _on_exit(self, standby: Standby) -> None:
        if standby is not self._ready:
            return  # handed over (the node's own watch reports it) or already dropped
        self._ready = None
        standby.close_fds()
        self._died()

    def _died(self) -> None:
        self._deaths += 1
        if self._deaths >= GIVE_UP_AFTER:
            log.info("the node program exits in standby (%d times in a row); nodes start cold", self._deaths)
            self.enabled = False
            return
        self.fill_soon(min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** (self._deaths - 1)))

    # -- handing over ----------------------------------------------------------------------

    def take(self, env: dict[str, str], header: bytes) -> Standby | None:
        """Tell the ready standby who it is; it is the caller's from here on (None: start cold).

        Its log header goes into its output pipe first, then the line; the
        write end is closed, so the pump sees end-of-file when the node ends.
        """
        standby, self._ready = self._ready, None
        if standby is None:
            return None
        if standby._cancel_watch is not None:
            standby._cancel_watch()
            standby._cancel_watch = None
        line = json.dumps({"env": {k: v for k, v in env.items() if k.startswith(procs.NODE_VARS_PREFIX)}}).encode() + b"\n"
        try:
            os.write(standby.out_write, header)
            stdin = standby.popen.stdin
            if stdin is None:
                raise ValueError("the standby has no standard input")
            stdin.write(line)
            stdin.close()
        except (OSError, ValueError):
            self._discard(standby)
            return None
        finally:
            line = b""
        os.close(standby.out_write)
        standby.out_write = -1
        self._deaths = 0
        return standby

    def _discard(self, standby: Standby) -> None:
        procs.kill_and_reap(standby.popen, self.platform, what="standby")
        standby.close_fds()

    def close(self) -> None:
        """End the standby (a standby without its host is of no use to anyone)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        standby, self._ready = self._ready, None
        if standby is not None:
            if standby._cancel_watch is not None:
                standby._cancel_watch()
            self._discard(standby)
