"""Entry point: ``cadre-node`` or ``python -m cadre_desktop.node``.

Configured only by environment variables (see docs/node-contract.md); a start-up
failure prints one line on stderr and exits with a code from :class:`ExitCode`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

#: When this node's start began: the process's start, or for a standby the moment it is told
#: who it is (it may have waited loaded for minutes; "ready in" measures this start only).
_STARTED_AT = time.monotonic()

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

from cadre_desktop.errors import CadreError  # noqa: E402
from cadre_desktop.net.plainasync import import_without_openssl  # noqa: E402
from cadre_desktop.node.errors import ExitCode, exit_code_of  # noqa: E402

USAGE = """\
usage: cadre-node   (no arguments; configured by environment variables)

  CADRE_NODE_ID, CADRE_NODE_DIR, CADRE_API_HOST, CADRE_API_PORT, CADRE_P2P_PORT,
  CADRE_ADVERTISE_HOST, and one of CADRE_CLAIM_SECRET, CADRE_INVITATION or
  CADRE_DONATION_ID (a lent node: with CADRE_PARTY_ID, CADRE_OWNER_KEYS,
  CADRE_SEED_TOKEN, and optionally CADRE_BOOTSTRAP_NODES, CADRE_PROFILE).
  Optional: CADRE_JOIN_TIMEOUT_MS, CADRE_CLAIM_MAX_FAILURES, CADRE_CLAIM_LOCKOUT_MS,
  CADRE_BODY_TIMEOUT_MS, CADRE_LOG_LEVEL. See docs/node-contract.md.
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        from cadre_desktop import __version__

        if args == ["--version"]:
            print(f"cadre-node {__version__}")
            return ExitCode.OK
        if args in (["--help"], ["-h"]):
            print(USAGE, end="")
            return ExitCode.OK
        print(f"cadre-node: error: unexpected arguments\n{USAGE}", end="", file=sys.stderr)
        return ExitCode.CONFIG
    # Until the event loop takes SIGTERM over, a stop request during start-up ends
    # the process at once, still with exit code 0 (the host asked for it).
    signal.signal(signal.SIGTERM, _stop_during_start_up)
    try:
        if os.environ.get(STANDBY_VAR) == "1":
            if not _stand_by():
                return ExitCode.OK  # the host went away before it needed this standby
        return _run()
    except CadreError as err:
        print(f"cadre-node: error: {err.message}", file=sys.stderr)
        return exit_code_of(err)
    except KeyboardInterrupt:  # Ctrl-C before the loop's own handler was installed
        return ExitCode.OK


STANDBY_VAR = "CADRE_STANDBY"
#: The one line a standby reads: {"env": {"CADRE_...": "..."}}; far more than any real one.
MAX_STANDBY_LINE = 64 * 1024


def _stand_by() -> bool:
    """Load everything a node needs, say `ready`, then wait on stdin to be told who it is
    (docs/node-contract.md), and say `taken` once told; or, asked to, fork nodes.

    Until that line comes the process has no identity, opens no port and
    touches no work folder. The line carries the node's CADRE_ variables,
    secrets included: a pipe, never the command line. False: stdin closed
    without a line (the host no longer wants it).

    On a socket, on Linux, the standby says `ready fork clone` (or `ready fork`,
    where it must fork twice): the host may then send it fork requests instead (`_serve_fork`), and each
    returns True in a new process that is that node; the standby itself serves
    on until its host goes.
    """
    import_without_openssl()  # loaded now (the node speaks plain HTTP only), so it is ready the moment it is told
    import logging  # noqa: F401

    from cadre_desktop.net import fdlimit  # noqa: F401
    from cadre_desktop.node import clock, config, identity, logs, node, node_dir, server, state  # noqa: F401

    channel = _channel()
    if channel is not None:
        import gc

        gc.freeze()  # what is loaded now is never collected: its pages stay shared with every fork
    global _CLONE
    _CLONE = _clone_parent() if channel is not None else None
    _tell_host(b"ready\n" if channel is None else b"ready fork clone\n" if _CLONE else b"ready fork\n")
    while True:
        line, fds = _read_request(channel)
        if not line:
            return False
        doc = _request(line)
        if "fork" not in doc:
            for fd in fds:
                os.close(fd)
            env = _standby_env(doc)
            _tell_host(b"taken\n")
            break
        if channel is None:
            from cadre_desktop.node.errors import ConfigError

            raise ConfigError("a fork request needs stdin to be a socket")
        forked = _serve_fork(channel, doc["fork"], fds)
        if forked is not None:
            env = forked
            break
    _become(env, channel)
    return True


def _become(env: dict[str, str], channel: socket.socket | None) -> None:
    """The standby (or its fork) is this node from here on: its variables, its folder, no stdin."""
    global _STARTED_AT
    _STARTED_AT = time.monotonic()
    os.environ.pop(STANDBY_VAR, None)
    os.environ.update(env)
    try:
        # The host finds its node processes by their environment, which for a standby names
        # no node: the work folder as the current directory does (and a cold start has it too).
        os.chdir(env.get("CADRE_NODE_DIR") or ".")
    except OSError:
        pass  # load_config reports a missing or bad folder in words
    if channel is not None:
        channel.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # nothing more is read; the host's end may close
    os.close(devnull)


#: At most this many descriptors come with one request (a fork request brings exactly one).
MAX_FDS = 4


def _channel() -> socket.socket | None:
    """Stdin as a socket, where forks are offered (Linux); None on a pipe or a file (run by hand)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return None
    import socket

    try:
        sock = socket.socket(fileno=os.dup(0))
    except OSError:
        return None
    if sock.type != socket.SOCK_STREAM or sock.family != socket.AF_UNIX:
        sock.close()
        return None
    return sock


def _read_request(channel: socket.socket | None) -> tuple[bytes, list[int]]:
    """One line (bounded) and the descriptors that came with it; b"" at end of file."""
    if channel is None:
        return sys.stdin.buffer.readline(MAX_STANDBY_LINE + 1), []
    import array
    import socket

    line = b""
    fds: list[int] = []
    while not line.endswith(b"\n") and len(line) <= MAX_STANDBY_LINE:
        data, ancdata, _flags, _addr = channel.recvmsg(MAX_STANDBY_LINE + 1 - len(line),
                                                       socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[:len(payload) - len(payload) % got.itemsize])
                fds.extend(got)
        if not data:
            for fd in fds:
                os.close(fd)
            return line, []
        line += data
    return line, fds


def _request(line: bytes) -> dict[str, object]:
    import json

    from cadre_desktop.node.errors import ConfigError

    if len(line) > MAX_STANDBY_LINE or not line.endswith(b"\n"):
        raise ConfigError("the standby line on stdin is too long or cut off")
    try:
        doc = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise ConfigError("the standby line on stdin is not JSON") from None
    if not isinstance(doc, dict):
        raise ConfigError('the standby line must be {"env": {"CADRE_...": "text", ...}}')
    return doc


def _serve_fork(channel: socket.socket, request: object, fds: list[int]) -> dict[str, str] | None:
    """Fork one node for the host: its environment in the new node (its session made, its cgroups joined,
    its output on the descriptor that came); None in the standby, which has answered
    `forked <pid>` (or `refused`) and reads on.

    The node is the host's child, so the host waits for its exit code as for any child it
    started itself: one clone with `CLONE_PARENT` (`_clone_parent`), or two forks, the first
    child leaving at once, so the node is orphaned to the host, which made itself a subreaper.
    The node says its pid only after `setsid`, so a stop the host sends its group the moment
    it knows the pid finds the group there."""
    env, reason = _fork_env(request, fds)
    if env is None:
        for fd in fds:
            os.close(fd)
        channel.sendall(b"refused " + reason.encode() + b"\n")
        return None
    assert isinstance(request, dict)
    out_fd = fds[0]
    read_end, write_end = os.pipe()
    join = request.get("join") or []
    clone = _CLONE
    try:
        # No falling back from a failed clone to two forks: the host, told `ready fork clone`,
        # is no subreaper, and a node orphaned to init would be nobody's child.
        first = clone() if clone is not None else os.fork()
    except OSError:
        for fd in (read_end, write_end, out_fd):
            os.close(fd)
        channel.sendall(b"refused fork failed\n")
        return None
    if first == 0:
        if clone is not None:  # already the host's child: no middle child to leave
            _after_clone(read_end)
            _become_node(write_end, out_fd, join)
        else:
            _in_the_middle(read_end, write_end, out_fd, join)
        return env  # only the node comes back here
    os.close(write_end)
    os.close(out_fd)
    said = b""
    while len(said) < 32:
        data = os.read(read_end, 32)
        if not data:
            break
        said += data
    os.close(read_end)
    if clone is None:
        try:
            os.waitpid(first, 0)
        except ChildProcessError:
            pass
    channel.sendall(b"forked " + said + b"\n" if said.isdigit() else b"refused the node did not start\n")
    return None


#: How this standby makes a node the host's child in one step (`_clone_parent`); None: two forks.
_CLONE: Callable[[], int] | None = None
#: Set to 1 in a standby's environment: always two forks (tests and benchmarks compare the ways).
TWO_FORKS_VAR = "CADRE_NODE_TWO_FORKS"
#: clone(2)'s system call number where its first argument is the flags (the others are 0 here).
_CLONE_NUMBERS = {"x86_64": 56, "aarch64": 220, "riscv64": 220}
_CLONE_PARENT = 0x00008000


def _clone_parent() -> Callable[[], int] | None:
    """A fork whose child is the standby's parent's child (`CLONE_PARENT`, Linux): the node is
    the host's own child at once, with one process made instead of two. None where the call
    is not known here (then two forks and the host as subreaper do the same).

    Safe only because a standby runs one thread: the child skips the C library's and
    Python's after-fork work, which matters only for other threads' locks (and `random`'s
    seed, renewed in `_after_clone`). Called without releasing the GIL (`PyDLL`)."""
    number = _CLONE_NUMBERS.get(os.uname().machine)
    if number is None or os.environ.get(TWO_FORKS_VAR) == "1":
        return None
    import ctypes

    try:
        libc = ctypes.PyDLL(None, use_errno=True)
        call = libc.syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long

    def clone() -> int:
        pid = int(call(ctypes.c_long(number), ctypes.c_ulong(_CLONE_PARENT | signal.SIGCHLD), None, None, None, None))
        if pid < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
        return pid
    return clone


def _after_clone(read_end: int) -> None:
    """In a cloned node: what an ordinary fork's child would have had done for it."""
    import random

    os.close(read_end)
    random.seed()


def _become_node(write_end: int, out_fd: int, join: list[str]) -> None:
    """In the node: its own session, its cgroups, its output; then its pid to the standby."""
    set_up = False
    try:
        os.setsid()
        for path in join:  # the node's cgroups from its first instruction as a node
            try:
                with open(path, "w", encoding="ascii") as fh:
                    fh.write("0")
            except OSError:
                pass  # the host places it after it knows the pid
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        os.write(write_end, str(os.getpid()).encode())
        os.close(write_end)
        set_up = True
    finally:
        if not set_up:  # never a node the host was not told of
            os._exit(ExitCode.INTERNAL)


def _in_the_middle(read_end: int, write_end: int, out_fd: int, join: list[str]) -> None:
    """The first child: fork the node and leave. Returns only in the node."""
    is_node = False
    try:
        os.close(read_end)
        is_node = os.fork() == 0
    finally:
        if not is_node:  # the middle child leaves, whatever happened: no pid reaches the standby then
            os._exit(0)
    _become_node(write_end, out_fd, join)


def _fork_env(request: object, fds: list[int]) -> tuple[dict[str, str] | None, str]:
    """A fork request's environment, checked; or None and why it was refused."""
    if len(fds) != 1:
        return None, "a fork request brings exactly one descriptor"
    if not isinstance(request, dict):
        return None, "a fork request is an object"
    join = request.get("join") or []
    if not isinstance(join, list) or len(join) > 8 or not all(
            isinstance(p, str) and p.startswith("/") and p.endswith("/cgroup.procs") and "\0" not in p
            and len(p) < 4096 for p in join):
        return None, "join names cgroup.procs files"
    try:
        return _standby_env({"env": request.get("env")}), ""
    except CadreError:
        return None, "env holds CADRE_ variables only"


def _tell_host(word: bytes) -> None:
    """Answer the host on stdin, which it made a socket: `ready` once loaded, `taken` once told
    who this is. On a plain pipe or a file (run by hand) there is nobody to tell."""
    try:
        os.write(0, word)
    except OSError:
        pass


def _standby_env(doc: dict[str, object]) -> dict[str, str]:
    from cadre_desktop.node.errors import ConfigError

    env = doc.get("env")
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and k.startswith("CADRE_") and k != STANDBY_VAR and isinstance(v, str)
            and "\0" not in v for k, v in env.items()):
        raise ConfigError('the standby line must be {"env": {"CADRE_...": "text", ...}}')
    return env


def _stop_during_start_up(signum: int, frame: object) -> None:
    raise SystemExit(ExitCode.OK)


def _run() -> int:
    import_without_openssl()  # the node speaks plain HTTP only
    from cadre_desktop.node.config import load_config

    config = load_config(os.environ)

    import asyncio
    import logging

    from cadre_desktop import __version__
    from cadre_desktop.net import fdlimit
    from cadre_desktop.node.clock import SystemClock
    from cadre_desktop.node.identity import load_or_create_identity
    from cadre_desktop.node.logs import redact, setup_logging
    from cadre_desktop.node.node import Node
    from cadre_desktop.node.node_dir import prepare_node_dir
    from cadre_desktop.node.state import StateStore

    setup_logging(config.node_id, config.tuning.log_level)
    fdlimit.raise_soft_limit()
    redact(config.claim_secret, config.invitation, config.host_token,
           config.donated.seed_token if config.donated else None)
    lock_fd = prepare_node_dir(config.node_dir)
    try:
        identity = load_or_create_identity(config.node_dir)
        store = StateStore(config.node_dir, config.node_id)
        node = Node(config, identity, store, SystemClock(), __version__)
        from cadre_desktop.node.server import serve

        try:
            asyncio.run(serve(node, _STARTED_AT))
        except CadreError:
            raise
        except Exception:  # our bug: logged with its traceback, and the host reads exit code 1
            logging.getLogger("cadre.node").exception("the node stopped on an unexpected error")
            return ExitCode.INTERNAL
    finally:
        os.close(lock_fd)
    _exit_at_once(ExitCode.LEASE_EXPIRED if node.lease_expired else ExitCode.OK)
    return ExitCode.OK  # not reached


def _exit_at_once(code: int) -> None:
    """End a node that stopped cleanly without the interpreter's own teardown.

    Its state is written whole as it changes and its listeners are closed by
    now, so tearing down every module and object (tens of ms of CPU per node,
    which a Quit of many nodes pays all at once on few cores) saves nothing
    worth keeping; the log lines are flushed first.
    """
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
