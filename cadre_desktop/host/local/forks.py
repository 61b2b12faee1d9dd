"""A node a fork server makes (Linux): the request, over the standby's socket.

A standby that says `ready fork clone` or `ready fork` (docs/node-contract.md, "Fork
server") makes each node of a crowd of warm starts the host's own child: a clone with
`CLONE_PARENT`, or two forks, the first child leaving at once, so the node is orphaned
to the host, which made itself a subreaper for it (`ProcessOS.become_subreaper`). `fork`
is one request; the node comes back as the host holds any child it started (pid, exit
code, reaping: `ProcessOS.adopt`, `system/linux.py`'s `Adopted`), once the pid it names is
proven to be this host's own new child (`ProcessOS.not_forked`): a pid it did not make is
refused in words, never adopted, and that process left alone. The fork server is
any `ForkServer` (the pool's `standby.Standby`): this module never imports the pool.

`park` asks a fork server for a child forked *ahead* (`{"park": {}}`): the host's own child,
proven as a forked node is, loaded and waiting on a socket of its own that comes with the
answer; `take` (on the loop) later tells that child who it is (the node's variables and the write end of
its output, as a fork request carries them). So the start after a kill costs a message to a
process that exists already: the fork, and its copy of the standby's page tables, were
paid before the kill (`parked.Parking` keeps one per fork server).
"""

from __future__ import annotations

import array
import asyncio
import errno
import json
import logging
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Protocol

from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.net.fdlimit import call_with_reserve
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

#: How long a start waits for a fork server's `forked` once its request is sent.
FORK_S = 2.0


class ForkServer(Protocol):
    """What a fork request uses of a standby: its process, its socket, one request at a time."""

    popen: subprocess.Popen[bytes]
    channel: socket.socket | None
    lock: threading.Lock


def fork(server: ForkServer, env: dict[str, str], header: bytes, join: list[Path],
         system: ProcessOS, held: frozenset[int] = frozenset()) -> tuple[subprocess.Popen[bytes], int] | None:
    """Ask a fork server for a node (blocking, up to FORK_S once sent; safe on any thread): the
    node's `CADRE_` variables and the write end of a new output pipe (its log header in it
    first) go over the socket, never argv. The node, already our child, and the pipe's read
    end; None: no node came (the caller settles, and the start goes on cold). A pid it names is
    proven first (`ProcessOS.not_forked`), and is none of the host's nodes already (`held`)."""
    request = json.dumps({"fork": {
        "env": {k: v for k, v in env.items() if k.startswith(procs.NODE_VARS_PREFIX)},
        "join": [str(path) for path in join]}}).encode() + b"\n"
    out_read, out_write = call_with_reserve(os.pipe)
    said, since = b"", None
    try:
        os.write(out_write, header)
        with server.lock:
            channel = server.channel
            if channel is None:
                raise OSError("the fork server is gone")
            channel.settimeout(FORK_S)
            since = system.fork_mark()
            channel.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [out_write]))])
            os.close(out_write)
            out_write = -1
            said = _answer(channel)
    except (OSError, ValueError) as exc:
        log.warning("the fork server (pid %s) did not fork a node within %.1f s (%s); ended, this start is cold",
                    server.popen.pid, FORK_S, getattr(exc, "strerror", None) or exc)
        said = b""
    finally:
        request = b""
        if out_write >= 0:
            os.close(out_write)
    word, _sp, rest = said.strip().partition(b" ")
    why = _refusal(system, int(rest), server.popen.pid, since, held) if _a_pid(word, rest) else None
    if _a_pid(word, rest) and why is None:
        args = [str(arg) for arg in server.popen.args] if isinstance(server.popen.args, list) else []
        return system.adopt(int(rest), args), out_read
    if why is not None:
        # Never adopted, so never reniced, moved into a node's group or ended: that process is
        # left alone (the kill below is of the fork server's own group).
        log.warning("the fork server (pid %s) named pid %s as the node it made, refused: %s; it is ended, "
                    "this start is cold and that process left alone", server.popen.pid, int(rest), why)
    elif said:
        log.warning("the fork server (pid %s) refused a node: %s", server.popen.pid,
                    one_line(said.decode("utf-8", "replace"), 200))
    # Ended at once, with its group: a node it was still making (not yet in its own session)
    # goes with it, so no late node ever runs beside the cold start that follows.
    system.kill_group(server.popen.pid)
    os.close(out_read)
    return None


def _refusal(system: ProcessOS, pid: int, server_pid: int, since: int | None, held: frozenset[int]) -> str | None:
    if pid in held:
        return "it is already one of this host's nodes"
    return system.not_forked(pid, server_pid, since)


def _a_pid(word: bytes, rest: bytes) -> bool:
    return word == b"forked" and rest.isdigit() and len(rest) < 12


PARK_REQUEST = b'{"park": {}}\n'


def park(server: ForkServer, system: ProcessOS) -> tuple[tuple[subprocess.Popen[bytes], socket.socket] | None, bool]:
    """Ask a fork server for a parked child (blocking, up to FORK_S; safe on any thread): that
    child, proven this host's own new child (`ProcessOS.not_forked`) and adopted, with the
    host's end of its socket; or None. The flag: the server refused (it does not park: no
    reason to ask it again). A server that did not answer, or named a pid it did not make, is
    ended with its group, as after a failed fork."""
    said, since = b"", None
    fds: list[int] = []
    with server.lock:
        channel = server.channel
        if channel is None:
            return None, False
        try:
            since = system.fork_mark()
            channel.settimeout(FORK_S)
            channel.sendall(PARK_REQUEST)
            said = _answer(channel, fds)
        except (OSError, ValueError) as exc:
            log.warning("the fork server (pid %s) did not park a child within %.1f s (%s); ended",
                        server.popen.pid, FORK_S, getattr(exc, "strerror", None) or exc)
            said = b""
    word, _sp, rest = said.strip().partition(b" ")
    if word == b"parked" and rest.isdigit() and len(rest) < 12 and len(fds) == 1:
        why = system.not_forked(int(rest), server.popen.pid, since)
        if why is None:
            args = [str(arg) for arg in server.popen.args] if isinstance(server.popen.args, list) else []
            return (system.adopt(int(rest), args), socket.socket(fileno=fds[0])), False
        log.warning("the fork server (pid %s) named pid %s as the child it parked, refused: %s; it is ended "
                    "and that process left alone", server.popen.pid, int(rest), why)
    for fd in fds:
        os.close(fd)
    if word == b"refused":
        log.info("the node program does not park a child ahead (%s); its starts fork as they come",
                 one_line(rest.decode("utf-8", "replace"), 200))
        return None, True
    if said and word != b"parked":
        log.warning("the fork server (pid %s) answered a park request with something else; ended", server.popen.pid)
    system.kill_group(server.popen.pid)
    return None, False


async def take(parked: ForkServer, env: dict[str, str], header: bytes, join: list[Path],
               system: ProcessOS) -> tuple[subprocess.Popen[bytes], int] | None:
    """Tell a parked child who it is, on the loop (it never blocks: one small message out on an
    empty socket, then up to FORK_S for the answer): the node's `CADRE_` variables and the write
    end of a new output pipe (its log header in it first), as a fork request carries them. The
    node (that same child, already adopted) and the pipe's read end; None: it did not say
    `taken`, and it was ended (the start goes on cold). Cancelled meanwhile, it is ended too:
    it may be a node by then, and nobody's."""
    request = json.dumps({"take": {
        "env": {k: v for k, v in env.items() if k.startswith(procs.NODE_VARS_PREFIX)},
        "join": [str(path) for path in join]}}).encode() + b"\n"
    out_read, out_write = call_with_reserve(os.pipe)
    said = b""
    try:
        os.write(out_write, header)
        channel = parked.channel
        if channel is None:
            raise OSError(errno.EBADF, "the parked child's socket is closed")
        channel.setblocking(False)
        channel.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [out_write]))])
        os.close(out_write)
        out_write = -1
        async with asyncio.timeout(FORK_S):
            while not said.endswith(b"\n") and len(said) < 256:
                data = await asyncio.get_running_loop().sock_recv(channel, 256 - len(said))
                if not data:
                    break
                said += data
    except (OSError, ValueError, TimeoutError) as exc:
        log.warning("the parked child (pid %s) was not taken within %.1f s (%s); ended, this start is cold",
                    parked.popen.pid, FORK_S, getattr(exc, "strerror", None) or exc or "no answer")
        said = b""
    except BaseException:
        system.kill_and_reap(parked.popen, what="parked child")
        os.close(out_read)
        raise
    finally:
        request = b""
        if out_write >= 0:
            os.close(out_write)
    if said == b"taken\n":
        return parked.popen, out_read
    if said:
        log.warning("the parked child (pid %s) refused its node: %s", parked.popen.pid,
                    one_line(said.decode("utf-8", "replace"), 200))
    system.kill_and_reap(parked.popen, what="parked child")
    os.close(out_read)
    return None


def _answer(channel: socket.socket, fds: list[int] | None = None) -> bytes:
    """The fork server's one-line answer (at most 256 bytes) within FORK_S; with `fds`, the
    descriptors that come with it are added to it as they arrive."""
    said, deadline = b"", time.monotonic() + FORK_S
    while not said.endswith(b"\n") and len(said) < 256:
        channel.settimeout(max(0.001, deadline - time.monotonic()))
        if fds is None:
            data = channel.recv(256 - len(said))
        else:
            data, ancdata, _flags, _addr = channel.recvmsg(256 - len(said), socket.CMSG_SPACE(4 * 4))
            fds.extend(_descriptors(ancdata))
        if not data:
            break
        said += data
    return said


def _descriptors(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    got = array.array("i")
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got.frombytes(payload[:len(payload) - len(payload) % got.itemsize])
    return list(got)
