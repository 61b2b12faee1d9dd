"""The reference node's standby on a socket (Linux): the requests a fork server serves.

A standby whose stdin is a Unix socket (docs/node-contract.md, "Fork server") may be asked,
beside its one line, to **fork** a node (`serve_fork`: the node is the host's own child, a
clone with `CLONE_PARENT` or two forks with the host a subreaper) or to **park** one
(`serve_park`): a child forked ahead, the host's own child in a session of its own, that
holds no identity, opens no port and touches no work folder until the host **takes** it
(`wait_parked`) with the node's variables and its output, on a socket of its own that the
host got with the answer. So a start takes a process already forked: the fork's copy of the
standby's page tables is paid before the kill, never after it.

Only the standby imports this (`__main__._stand_by`); it runs one thread, which the clone
relies on (`clone_parent`). Imports are inside the functions: the node's cold start, which
never forks, loads none of it.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING

from cadre_desktop.errors import CadreError
from cadre_desktop.node.errors import ExitCode

if TYPE_CHECKING:
    import asyncio
    import socket
    from collections.abc import Callable

STANDBY_VAR = "CADRE_STANDBY"
#: A parked child's event loop, made while it waited (after its fork: its own); its node runs on it.
LOOP: asyncio.AbstractEventLoop | None = None
#: The one line a standby reads: {"env": {"CADRE_...": "..."}}; far more than any real one.
MAX_STANDBY_LINE = 64 * 1024


def set_clone(clone: Callable[[], int] | None) -> None:
    """How this standby's forks are made from now on (`clone_parent`'s answer, or None: two forks)."""
    global _CLONE
    _CLONE = clone


#: At most this many descriptors come with one request (a fork request brings exactly one).
MAX_FDS = 4


def channel() -> socket.socket | None:
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


def read_request(channel: socket.socket | None) -> tuple[bytes, list[int]]:
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


def request(line: bytes) -> dict[str, object]:
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


def serve_fork(channel: socket.socket, request: object, fds: list[int]) -> dict[str, str] | None:
    """Fork one node for the host: its environment in the new node (its session made, its cgroups joined,
    its output on the descriptor that came); None in the standby, which has answered
    `forked <pid>` (or `refused`) and reads on.

    The node is the host's child, so the host waits for its exit code as for any child it
    started itself: one clone with `CLONE_PARENT` (`clone_parent`), or two forks, the first
    child leaving at once, so the node is orphaned to the host, which made itself a subreaper.
    The node says its pid only after `setsid`, so a stop the host sends its group the moment
    it knows the pid finds the group there."""
    env, reason = fork_env(request, fds)
    if env is None:
        for fd in fds:
            os.close(fd)
        channel.sendall(b"refused " + reason.encode() + b"\n")
        return None
    assert isinstance(request, dict)
    out_fd = fds[0]
    read_end, write_end = os.pipe()
    join = request.get("join") or []
    try:
        first = _fork_to_host(read_end)
    except OSError:
        for fd in (read_end, write_end, out_fd):
            os.close(fd)
        channel.sendall(b"refused fork failed\n")
        return None
    if first == 0:
        _become_node(write_end, out_fd, join)
        return env  # only the node comes back here
    os.close(out_fd)
    said = _pid_told(first, read_end, write_end)
    channel.sendall(b"forked " + said + b"\n" if said.isdigit() else b"refused the node did not start\n")
    return None


def serve_park(channel: socket.socket, fds: list[int]) -> socket.socket | None:
    """Fork a parked child for the host (`{"park": {}}`): in that child, its own socket, which
    `wait_parked` reads; None in the standby, which has answered `parked <pid>` with the host's
    end of that socket as the one descriptor (or `refused`), and reads on.

    The parked child is made as a forked node is (the host's own child, `_fork_to_host`), leads
    a session of its own at once (so the host may hold it as it holds a node: its group, its
    pid proven, `ProcessOS.not_forked`), lets go of the standby's socket and stdin, and does
    what any node does first and needs no identity for (its event loop made, `LOOP`). It
    tells its pid only then, so a parked child the host is told of is ready to be taken. A park
    request brings no descriptor (any that came are closed)."""
    import array
    import socket

    for fd in fds:
        os.close(fd)

    own, hosts = socket.socketpair()
    read_end, write_end = os.pipe()
    try:
        first = _fork_to_host(read_end)
    except OSError:
        for fd in (read_end, write_end):
            os.close(fd)
        own.close()
        hosts.close()
        channel.sendall(b"refused fork failed\n")
        return None
    if first == 0:
        _park(write_end, channel, hosts)
        return own
    own.close()
    said = _pid_told(first, read_end, write_end)
    try:
        if said.isdigit():
            channel.sendmsg([b"parked " + said + b"\n"],
                            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [hosts.fileno()]))])
        else:
            channel.sendall(b"refused the parked child did not start\n")
    finally:
        hosts.close()
    return None


def _park(write_end: int, channel: socket.socket, hosts: socket.socket) -> None:
    """In the parked child: a session of its own, nothing of the standby's channel, its pages its
    own, its event loop made; then its pid to the standby."""
    set_up = False
    try:
        hosts.close()
        channel.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # stdin was the standby's socket to the host: never read here
        os.close(devnull)
        os.setsid()
        _own_pages()
        import asyncio

        global LOOP
        LOOP = asyncio.new_event_loop()  # its own (made after the fork): the node's start makes none
        os.write(write_end, str(os.getpid()).encode())
        os.close(write_end)
        set_up = True
    finally:
        if not set_up:  # never a parked child the host was not told of
            os._exit(ExitCode.INTERNAL)


#: madvise(2)'s MADV_POPULATE_WRITE (Linux 5.14): fault pages in writable, as a write would, without writing.
_POPULATE_WRITE = 23


def _own_pages() -> None:
    """Copy now every page this child shares with the standby and may write (each writable
    private mapping faulted in writable by `madvise`, contents untouched): a node's first
    writes would otherwise each fault a page over from the standby, milliseconds after it is
    taken. It costs the parked child its own copy of them (its PSS: bench/README.md). A
    mapping gone meanwhile, or a kernel without the call, only leaves pages shared."""
    import ctypes

    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as fh:
            maps = fh.read(1 << 20).splitlines()
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for line in maps:
        fields = line.split()
        if len(fields) < 2 or not fields[1].startswith("rw") or fields[1][3:4] != "p" or (
                len(fields) > 5 and fields[5].startswith("[v")):
            continue
        start, _dash, end = fields[0].partition("-")
        first, last = int(start, 16), int(end, 16)
        if madvise(first, last - first, _POPULATE_WRITE) != 0 and ctypes.get_errno() == 22:  # EINVAL: not known here
            return


def wait_parked(own: socket.socket) -> dict[str, str] | None:
    """In a parked child: wait for the host's `{"take": {"env": {…}, "join": […]}}` with one
    descriptor (the node's output), then join its cgroups, put that output on stdout and
    stderr, say `taken` and return the node's environment. None: the host let go of it
    (end of file), and it exits quietly. Anything else is refused in words and ends it
    (ConfigError: exit code 2): a parked child is taken once, or never."""
    from cadre_desktop.node.errors import ConfigError

    line, fds = read_request(own)
    if not line:
        return None
    doc = request(line)
    take = doc.get("take")
    env, reason = fork_env(take, fds) if take is not None else (None, "a parked child is only taken")
    if env is None or not isinstance(take, dict):
        for fd in fds:
            os.close(fd)
        own.sendall(b"refused " + reason.encode() + b"\n")
        raise ConfigError(f"the parked child's request was refused: {reason}")
    _join(take.get("join") or [])
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    os.close(fds[0])
    own.sendall(b"taken\n")
    return env


def _fork_to_host(read_end: int) -> int:
    """Fork a child that is the host's own: one clone with `CLONE_PARENT`, or two forks, the
    first child leaving at once so the second is orphaned to the host, its subreaper. 0 in
    that child (`read_end` closed there), the first child's pid in the standby; OSError: no
    fork was made. No falling back from a failed clone to two forks: the host, told `ready
    fork clone`, is no subreaper, and a child orphaned to init would be nobody's."""
    clone = _CLONE
    first = clone() if clone is not None else os.fork()
    if first != 0:
        return first
    if clone is not None:  # already the host's child: no middle child to leave
        _after_clone(read_end)
        return 0
    is_child = False
    try:
        os.close(read_end)
        is_child = os.fork() == 0
    finally:
        if not is_child:  # the middle child leaves, whatever happened: no pid reaches the standby then
            os._exit(0)
    return 0


def _pid_told(first: int, read_end: int, write_end: int) -> bytes:
    """In the standby: the pid its new child wrote (bounded), the middle child reaped if two forks."""
    os.close(write_end)
    said = b""
    while len(said) < 32:
        data = os.read(read_end, 32)
        if not data:
            break
        said += data
    os.close(read_end)
    if _CLONE is None:
        try:
            os.waitpid(first, 0)
        except ChildProcessError:
            pass
    return said


#: How this standby makes a node the host's child in one step (`clone_parent`); None: two forks.
_CLONE: Callable[[], int] | None = None
#: Set to 1 in a standby's environment: always two forks (tests and benchmarks compare the ways).
TWO_FORKS_VAR = "CADRE_NODE_TWO_FORKS"
#: clone(2)'s system call number where its first argument is the flags (the others are 0 here).
_CLONE_NUMBERS = {"x86_64": 56, "aarch64": 220, "riscv64": 220}
_CLONE_PARENT = 0x00008000


def clone_parent() -> Callable[[], int] | None:
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
        _join(join)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        os.write(write_end, str(os.getpid()).encode())
        os.close(write_end)
        set_up = True
    finally:
        if not set_up:  # never a node the host was not told of
            os._exit(ExitCode.INTERNAL)


def _join(join: list[str]) -> None:
    """Into the node's cgroups (each `cgroup.procs` named, checked by `fork_env`) from its first instruction."""
    for path in join:
        try:
            with open(path, "w", encoding="ascii") as fh:
                fh.write("0")
        except OSError:
            pass  # the host places it after it knows the pid


def fork_env(request: object, fds: list[int]) -> tuple[dict[str, str] | None, str]:
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
        return standby_env({"env": request.get("env")}), ""
    except CadreError:
        return None, "env holds CADRE_ variables only"



def standby_env(doc: dict[str, object]) -> dict[str, str]:
    from cadre_desktop.node.errors import ConfigError

    env = doc.get("env")
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and k.startswith("CADRE_") and k != STANDBY_VAR and isinstance(v, str)
            and "\0" not in v for k, v in env.items()):
        raise ConfigError('the standby line must be {"env": {"CADRE_...": "text", ...}}')
    return env

