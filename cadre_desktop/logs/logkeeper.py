"""The log keeper: one process per home writing every node's output into its log, each under its cap.

Why this shape. A node must outlive the host that started it and be
re-attached by the next host, and so must the capture of its output: a node
that went on running while no host ran must still have its output in its log.
A node's output is a pipe; whoever holds the pipe's read end can read it, and
the pipe lives as long as one of its readers does. So:

- the host makes the pipe, gives its write end to the node as stdout and
  stderr, and hands its read end to the keeper over a Unix socket
  (`SCM_RIGHTS`), keeping a copy of the read end itself;
- the keeper runs in a session of its own (it outlives the host exactly as the
  nodes do) and reads every pipe it holds, writing each into its node's log
  through `logpump.CappedLog` (the same cap, rotation and 0600 files as the
  per-node pump it replaces);
- a host that restarts connects to the keeper's socket and is handed a copy of
  every read end back (the keeper never forgets a stream while it is open);
- a keeper that dies is noticed by its host at once (its socket ends) and
  replaced: the host gives its copies of the read ends to a new keeper, which
  writes a line into each log saying output may be missing there. Nothing the
  node wrote meanwhile is lost (it waits in the pipe); only what the dead keeper
  had read and not yet written (at most one chunk, 64 KiB).

Only when the keeper and the host both end does a running node's output have
no reader left (its writes then fail with EPIPE); the next host says so in the
node's log. The alternatives were weighed: the host reading every pipe itself
loses the pipes with the host; a FIFO per node keeps its name across restarts
but blocks a node whose reader is gone and needs a second channel to tell the
host a log is whole; a pump per node (the old shape) costs a process and ~10 MB
per node. This costs one process for the whole home, one descriptor per live
node in the host and in the keeper, and a socket.

Protocol, one JSON object per line on a Unix stream socket; a line that names a
descriptor is sent with exactly one descriptor attached:
- host → keeper `{"op": "watch", "id", "node", "log", "cap", "note"?}` + fd: keep
  this stream (its log must be a file directly in the keeper's logs folder);
- host → keeper `{"op": "hello"}`: the keeper answers `{"op": "have", ...}` + fd
  for every stream it keeps, then `{"op": "ready", "pid"}`;
- keeper → hosts `{"op": "ended", "id"}`: the stream ended (the node and all it
  started closed their output) and its last bytes are in the log.
The keeper ends when it keeps no stream and no host is connected. Termination
signals are ignored, as in the pump: a Ctrl-C in the host's terminal must not
cut off every node's output.

Usage: `python -I -S logkeeper.py <socket path> <logs folder>` with the first
host's end of a socket pair as standard input. Inside a bundle:
`cadre-desktop --log-keeper ...`. POSIX only (Windows keeps a pump per node,
which also holds the node's Job object).
"""

from __future__ import annotations

import collections
import errno
import json
import os
import selectors
import signal
import socket
import stat
import struct
import sys

if __package__:
    from cadre_desktop.logs.logpump import CHUNK, CappedLog
else:  # run as a file (`python -I -S logkeeper.py`): its neighbour, without the package's imports
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]
    from logpump import CHUNK, CappedLog  # type: ignore[no-redef]  # noqa: I001

#: How a bundle's executable is told to be the log keeper (cli/commands.py dispatches it).
FLAG = "--log-keeper"
#: A control line longer than this is a broken peer: it is dropped.
MAX_LINE = 16 * 1024
#: How long a send to a host may block before that host is dropped.
SEND_TIMEOUT_S = 2.0


class Stream:
    """One node's output: the pipe's read end and the log it goes into."""

    def __init__(self, fd: int, sid: str, node: str, path: str, cap: int) -> None:
        self.fd = fd
        self.id = sid
        self.node = node
        self.path = path
        self.cap = cap
        self.log: CappedLog | None = None

    def write(self, data: bytes) -> None:
        try:
            if self.log is None:
                self.log = CappedLog(self.path, self.cap)
            self.log.write(data)
        except OSError:
            pass  # the folder went away (a Remove) or a full disk: keep draining so the node never blocks

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
        os.close(self.fd)


class Peer:
    """A host connected to the keeper: its socket, what it sent that is not a whole line yet."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.fds: collections.deque[int] = collections.deque()


class Keeper:
    def __init__(self, logs_dir: str, listener: socket.socket | None) -> None:
        self.logs_dir = os.path.realpath(logs_dir)
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.streams: dict[str, Stream] = {}
        self.peers: dict[int, Peer] = {}
        if listener is not None:
            self.selector.register(listener, selectors.EVENT_READ, ("listen", None))

    # -- hosts ------------------------------------------------------------------------

    def add_peer(self, sock: socket.socket) -> None:
        sock.settimeout(SEND_TIMEOUT_S)
        peer = Peer(sock)
        self.peers[sock.fileno()] = peer
        self.selector.register(sock, selectors.EVENT_READ, ("peer", peer))

    def drop_peer(self, peer: Peer) -> None:
        if self.peers.pop(peer.sock.fileno(), None) is None:
            return
        self.selector.unregister(peer.sock)
        peer.sock.close()
        while peer.fds:
            os.close(peer.fds.popleft())

    def accept(self) -> None:
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        if not same_user(sock):
            sock.close()
            return
        self.add_peer(sock)

    def read_peer(self, peer: Peer) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(peer.sock, 65536, 16)
        except OSError:
            data, fds = b"", []
        peer.fds.extend(fds)
        if not data:
            self.drop_peer(peer)
            return
        peer.buffer += data
        while b"\n" in peer.buffer:
            line, peer.buffer = peer.buffer.split(b"\n", 1)
            self.handle(peer, line)
            if peer.sock.fileno() not in self.peers:
                return
        if len(peer.buffer) > MAX_LINE:
            self.drop_peer(peer)

    def handle(self, peer: Peer, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        if msg.get("op") == "watch":
            fd = peer.fds.popleft() if peer.fds else -1
            if fd >= 0:
                self.watch(msg, fd)
        elif msg.get("op") == "hello":
            for stream in list(self.streams.values()):
                self.send(peer, {"op": "have", "id": stream.id, "node": stream.node, "log": stream.path,
                                 "cap": stream.cap}, stream.fd)
            self.send(peer, {"op": "ready", "pid": os.getpid()})

    def send(self, peer: Peer, msg: dict[str, object], fd: int | None = None) -> None:
        line = json.dumps(msg).encode() + b"\n"
        try:
            if fd is None:
                peer.sock.sendall(line)
            else:
                socket.send_fds(peer.sock, [line], [fd])
        except OSError:
            self.drop_peer(peer)

    # -- streams ----------------------------------------------------------------------

    def watch(self, msg: dict[str, object], fd: int) -> None:
        sid, node, path, cap, note = msg.get("id"), msg.get("node"), msg.get("log"), msg.get("cap"), msg.get("note")
        if (not isinstance(sid, str) or not isinstance(node, str) or not isinstance(path, str)
                or not isinstance(cap, int) or sid in self.streams or not self.in_logs(path)
                or not stat.S_ISFIFO(os.fstat(fd).st_mode)):
            os.close(fd)
            return
        stream = Stream(fd, sid, node, path, cap)
        if isinstance(note, str):
            stream.write(note.replace("\n", " ")[:1000].encode() + b"\n")
        self.streams[sid] = stream
        self.selector.register(fd, selectors.EVENT_READ, ("stream", stream))

    def in_logs(self, path: str) -> bool:
        """A log the keeper writes is a file directly in its logs folder, nowhere else."""
        return os.path.isabs(path) and os.path.realpath(os.path.dirname(path)) == self.logs_dir

    def read_stream(self, stream: Stream) -> None:
        try:
            data = os.read(stream.fd, CHUNK)
        except InterruptedError:
            return
        except OSError:
            data = b""
        if data:
            stream.write(data)
            return
        self.selector.unregister(stream.fd)
        del self.streams[stream.id]
        stream.close()
        for peer in list(self.peers.values()):
            self.send(peer, {"op": "ended", "id": stream.id})

    # -- the loop -----------------------------------------------------------------------

    def run(self) -> None:
        while self.streams or self.peers:
            for key, _ in self.selector.select():
                kind, obj = key.data
                if kind == "stream":
                    self.read_stream(obj)
                elif kind == "peer":
                    self.read_peer(obj)
                else:
                    self.accept()


def same_user(sock: socket.socket) -> bool:
    """Linux: the peer runs as this user (the socket's folder is private elsewhere too)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    try:
        cred: tuple[int, int, int] = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i")))
    except OSError:
        return False
    _pid, uid, _gid = cred
    return uid == os.getuid()


def listen(path: str) -> socket.socket | None:
    """Listen at `path` for later hosts; None when a live keeper already does (it keeps its
    own streams; this one serves only the host that started it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            sock.close()
            return None
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            sock.close()
            return None
        except OSError:
            os.unlink(path)  # a dead keeper's socket
            sock.bind(path)
        finally:
            probe.close()
    os.chmod(path, 0o600)
    sock.listen(16)
    return sock


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: logkeeper <socket path> <logs folder>", file=sys.stderr)
        return 2
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    try:
        first = socket.socket(fileno=0)
    except OSError:
        print("logkeeper: standard input is not a socket", file=sys.stderr)
        return 2
    try:
        listener = listen(argv[0])
    except OSError as exc:
        print(f"logkeeper: cannot listen at {argv[0]}: {exc}", file=sys.stderr)
        listener = None
    bound = os.stat(argv[0]).st_ino if listener is not None else None
    keeper = Keeper(argv[1], listener)
    keeper.add_peer(first)
    try:
        keeper.run()
    finally:
        if bound is not None:
            try:
                if os.stat(argv[0]).st_ino == bound:
                    os.unlink(argv[0])
            except OSError:
                pass
    return 0


def run(argv: list[str]) -> None:
    code = main(argv)
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run(sys.argv[1:])
