"""Nodes a fork server makes (Linux): the host as their subreaper, the request, the children.

A standby that says `ready fork clone` or `ready fork` (docs/node-contract.md, "Fork
server") makes each node of a crowd of warm starts the host's own child: a clone with
`CLONE_PARENT`, or two forks, the first child leaving at once, so the node is orphaned
to the host, which made itself a subreaper for it (`become_subreaper`). `Adopted` is
that node as the host holds any child it started (pid, exit code, reaping), and `fork`
is one request. A subreaper gets every orphan below it, not only its nodes (a node's
own children, a desktop opener's); `stale_zombies` says which of their zombies nobody
waits for, and the pool reaps them on a slow sweep.
"""

from __future__ import annotations

import array
import json
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cadre_desktop.host.local.system import procs
from cadre_desktop.net.fdlimit import call_with_reserve
from cadre_desktop.text import one_line

if TYPE_CHECKING:
    from cadre_desktop.host.local.standby import Standby

log = logging.getLogger(__name__)

#: How long a start waits for a fork server's `forked` once its request is sent.
FORK_S = 2.0


#: prctl(2) option that makes orphaned descendants children of this process.
PR_SET_CHILD_SUBREAPER = 36
_subreaper: bool | None = None


def can_adopt(platform: str = procs.CURRENT) -> bool:
    """Whether nodes a fork server makes can be held here as children (Linux with pidfds)."""
    return platform.startswith("linux") and getattr(os, "pidfd_open", None) is not None


def subreaping() -> bool:
    """Whether this process made itself a subreaper (so orphans' zombies may come to it)."""
    return bool(_subreaper)


def become_subreaper(platform: str = procs.CURRENT, prctl: Callable[[int, int], int] | None = None) -> bool:
    """Make this process the parent of any descendant orphaned below it (Linux, once; True if
    it is). A node forked by a standby's fork server is orphaned at once and so becomes our
    child: we reap it and read its exit code as for any child we started. Elsewhere False:
    there, standbys hand themselves over instead of forking."""
    global _subreaper
    if not can_adopt(platform):
        return False
    if prctl is not None:  # a test's: asked, never remembered
        return _ask_prctl(prctl)
    if _subreaper is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = _ask_prctl(lambda option, value: int(libc.prctl(option, value, 0, 0, 0)))
        except (OSError, AttributeError) as exc:
            log.debug("cannot become a subreaper: %s", exc)
            _subreaper = False
    return _subreaper


def _ask_prctl(prctl: Callable[[int, int], int]) -> bool:
    return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0


class Adopted(subprocess.Popen[bytes]):
    """A child this process did not fork itself (a node a fork server made, orphaned to us as
    a subreaper), with what the host uses of a `Popen`: `pid`, `returncode`, `poll`, `wait`.
    Its exit code is None when it was reaped by someone else (never ours to know)."""

    def __init__(self, pid: int, args: Sequence[str] = ()) -> None:  # no super(): nothing is started
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None
        self._child_created = False  # Popen.__del__ leaves it alone
        self._lock = threading.Lock()
        self._gone = False

    def __repr__(self) -> str:
        return f"<Adopted pid={self.pid} returncode={self.returncode}>"

    def poll(self) -> int | None:
        self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended (None: not ours to know); TimeoutExpired after `timeout`."""
        if not self._gone and timeout is not None:
            if not _ends_within(self.pid, timeout):
                self._reap(os.WNOHANG)
                if not self._gone:
                    raise subprocess.TimeoutExpired(self.args, timeout)
        self._reap(0)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if not self._gone:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _reap(self, flags: int) -> None:
        with self._lock:
            if self._gone:
                return
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # not (or no longer) our child: gone, its code unknown
                self._gone = True
                return
            if pid == self.pid:
                self._gone = True
                self.returncode = os.waitstatus_to_exitcode(status)


def _ends_within(pid: int, timeout: float) -> bool:
    """Whether `pid` ends within `timeout` s (its pidfd turns readable); True if it is gone."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        readable, _w, _x = select.select([fd], [], [], max(0.0, timeout))
        return bool(readable)
    finally:
        os.close(fd)


def stale_zombies(children: Sequence[tuple[int, str]], seen: set[int]) -> tuple[list[int], set[int]]:
    """Which of our zombie `children` (pid, state) to reap now: those that were zombies at the
    last look already (`seen`) — any child someone of ours waits for is reaped within
    milliseconds of its end, so a zombie that stays is an orphan a subreaper got (a node's own
    child, a desktop opener's), which nobody else will ever wait for. And the zombies to
    remember for the next look."""
    zombies = {pid for pid, state in children if state == "Z"}
    return sorted(zombies & seen), zombies - seen


def child_states(pid: int | None = None) -> list[tuple[int, str]]:
    """This process's children (Linux) with their state letter, from each thread's children list."""
    me = os.getpid() if pid is None else pid
    found: list[tuple[int, str]] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return found
    pids: set[int] = set()
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children", "rb") as fh:
                pids.update(int(word) for word in fh.read().split())
        except (OSError, ValueError):
            continue
    for child in sorted(pids):
        fields = procs.stat_fields(child)
        if fields:
            found.append((child, fields[0]))
    return found


def reap(pids: Sequence[int]) -> None:
    """Reap zombies nobody waits for (`stale_zombies`); one already gone is skipped."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def fork(server: Standby, env: dict[str, str], header: bytes, join: list[Path]) -> tuple[Adopted, int] | None:
    """Ask a fork server for a node (blocking, up to FORK_S once sent; safe on any thread): the
    node's `CADRE_` variables and the write end of a new output pipe (its log header in it
    first) go over the socket, never argv. The node, already our child, and the pipe's read
    end; None: no node came (the caller settles, and the start goes on cold)."""
    request = json.dumps({"fork": {
        "env": {k: v for k, v in env.items() if k.startswith(procs.NODE_VARS_PREFIX)},
        "join": [str(path) for path in join]}}).encode() + b"\n"
    out_read, out_write = call_with_reserve(os.pipe)
    said = b""
    try:
        os.write(out_write, header)
        with server.lock:
            channel = server.channel
            if channel is None:
                raise OSError("the fork server is gone")
            channel.settimeout(FORK_S)
            channel.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [out_write]))])
            os.close(out_write)
            out_write = -1
            deadline = time.monotonic() + FORK_S
            while not said.endswith(b"\n") and len(said) < 256:
                channel.settimeout(max(0.001, deadline - time.monotonic()))
                data = channel.recv(256 - len(said))
                if not data:
                    break
                said += data
    except (OSError, ValueError) as exc:
        log.warning("the fork server (pid %s) did not fork a node within %.1f s (%s); ended, this start is cold",
                    server.popen.pid, FORK_S, getattr(exc, "strerror", None) or exc)
        said = b""
    finally:
        request = b""
        if out_write >= 0:
            os.close(out_write)
    word, _sp, rest = said.strip().partition(b" ")
    if word == b"forked" and rest.isdigit() and len(rest) < 12:
        return Adopted(int(rest), list(server.popen.args) if isinstance(server.popen.args, list) else []), out_read
    if said:
        log.warning("the fork server (pid %s) refused a node: %s", server.popen.pid,
                    one_line(said.decode("utf-8", "replace"), 200))
    # Ended at once, with its group: a node it was still making (not yet in its own session)
    # goes with it, so no late node ever runs beside the cold start that follows.
    procs.kill_group(server.popen.pid)
    os.close(out_read)
    return None
