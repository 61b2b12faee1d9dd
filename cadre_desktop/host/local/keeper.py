"""The host's side of the log keeper (`cadre_desktop.logs.logkeeper`, whose docstring says why one
process per home, holding every node's pipe, is the shape).

`LogKeeper` starts the keeper on the first node start (a home with no node runs
none), hands it each child's output (`watch`: the pipe's read end over the
socket; the host keeps a copy), hears when a stream ended (its node's last
bytes are in the log: the exit is told then), and replaces a keeper that died,
handing it the copies with a line for each log saying output may be missing.
A restarted host finds the running keeper at its socket (`attach`) and takes
the copies back. The socket lives in a private folder of the user's runtime
folder, named after the home (a Unix socket's path is short; a home's may not
be), so two homes never share a keeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cadre_desktop.files.atomicfile import ensure_private_dir
from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.logs import logkeeper
from cadre_desktop.net.fdlimit import call_with_reserve
from cadre_desktop.paths import Paths

log = logging.getLogger(__name__)

#: A keeper that dies this many times within `DEATHS_WINDOW_S` is started again only after a pause.
DEATHS_IN_A_ROW = 3
DEATHS_WINDOW_S = 60.0
RESTART_PAUSE_S = 5.0
#: How long connecting to a running keeper and taking its streams back may take.
ATTACH_TIMEOUT_S = 3.0


@dataclass
class Kept:
    """One node child's output as the host knows it: its copy of the pipe's read end."""

    fd: int
    node_id: str
    log_path: str
    cap: int
    #: Set once the keeper wrote the stream's last bytes (the child and all it started ended).
    done: asyncio.Event = field(default_factory=asyncio.Event)


def socket_path(paths: Paths) -> Path:
    """`<runtime folder>/cadre-desktop-<uid>/keeper-<hash of the home>.sock`, in a folder only we use."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    folder = Path(base) / f"cadre-desktop-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = folder.lstat()
    if st.st_uid != os.getuid() or not folder.is_dir() or folder.is_symlink():
        raise OSError(f"{folder} is not a folder of this user")
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)
    digest = hashlib.sha256(str(paths.data_dir.absolute()).encode()).hexdigest()[:16]
    return folder / f"keeper-{digest}.sock"


def keeper_command(sock: Path, logs_dir: Path) -> list[str]:
    """The keeper as the host runs it: a bundle's own executable, or this Python on the file
    (`-I -S`: the standard library only, which starts faster and holds less memory)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, logkeeper.FLAG, str(sock), str(logs_dir)]
    return [sys.executable, "-I", "-S", logkeeper.__file__, str(sock), str(logs_dir)]


class LogKeeper:
    """The one log keeper of a home, seen from its host."""

    def __init__(self, paths: Paths, system: ProcessOS) -> None:
        self.paths = paths
        self.system = system
        self.streams: dict[str, Kept] = {}
        #: The keeper's pid while one is connected (for views, benchmarks and tests).
        self.pid: int | None = None
        self._sock: socket.socket | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._deaths: list[float] = []
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -- a running keeper, after a host restart ---------------------------------------------

    async def attach(self) -> None:
        """Connect to the keeper an earlier host left running and take its streams back."""
        try:
            path = socket_path(self.paths)
        except OSError as exc:
            log.warning("no folder for the log keeper's socket: %s", exc)
            return
        found = await asyncio.to_thread(_connect, path)
        if found is None or self._closed:
            return
        sock, pid, haves = found
        for msg, fd in haves:
            sid, node, path_, cap = msg.get("id"), msg.get("node"), msg.get("log"), msg.get("cap")
            if isinstance(sid, str) and isinstance(node, str) and isinstance(path_, str) and isinstance(cap, int):
                self.streams[sid] = Kept(fd, node, path_, cap)
            else:
                os.close(fd)  # a keeper of another version; its stream ends with its child
        self._use(sock, pid, None)
        log.info("re-attached to the log keeper (pid %s) keeping %d node output(s)", pid, len(haves))

    def stream_for(self, handle_id: str, node_id: str) -> Kept | None:
        """The stream of a re-attached child: by its handle, or (a child found running untracked,
        given a new handle id) the newest stream of its node."""
        kept = self.streams.get(handle_id)
        if kept is None:
            kept = next((k for k in reversed(self.streams.values()) if k.node_id == node_id), None)
        return kept

    # -- handing it output ----------------------------------------------------------------------

    def watch(self, stream_id: str, node_id: str, log_path: Path, cap: int, read_end: int) -> asyncio.Event:
        """Have the keeper write `read_end` into `log_path`; the event is set once its last bytes are there.

        OSError: no keeper could be started (nothing of this stream is kept then).
        """
        ensure_private_dir(log_path.parent)
        kept = Kept(call_with_reserve(os.dup, read_end), node_id, str(log_path), cap)
        self.streams[stream_id] = kept
        try:
            if self._sock is None:
                self._start()
        except OSError:
            del self.streams[stream_id]
            os.close(kept.fd)
            raise
        try:
            self._send(stream_id, kept)
        except OSError:
            self._lost()  # it died and its end is not seen yet: a new one gets every stream, this one too
        return kept.done

    def _send(self, stream_id: str, kept: Kept, note: str | None = None) -> None:
        assert self._sock is not None
        msg: JSONObject = {"op": "watch", "id": stream_id, "node": kept.node_id, "log": kept.log_path,
                               "cap": kept.cap}
        if note:
            msg["note"] = note
        socket.send_fds(self._sock, [json.dumps(msg).encode() + b"\n"], [kept.fd])

    def _start(self) -> None:
        path = socket_path(self.paths)
        ours, theirs = socket.socketpair()
        try:
            popen = call_with_reserve(
                self.system.spawn, keeper_command(path, self.paths.log_dir), env=procs.without_node_vars(os.environ),
                cwd=None, stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._use(ours, popen.pid, popen)

    def _use(self, sock: socket.socket, pid: int, popen: subprocess.Popen[bytes] | None) -> None:
        sock.settimeout(logkeeper.SEND_TIMEOUT_S)
        self._sock, self.pid, self._popen, self._buffer = sock, pid, popen, b""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._on_readable)

    # -- what it says ---------------------------------------------------------------------------

    def _on_readable(self) -> None:
        if self._sock is None:
            return
        try:
            data, fds, _flags, _addr = socket.recv_fds(self._sock, 65536, 16)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            data, fds = b"", []
        for fd in fds:
            os.close(fd)  # descriptors come only as answers to a hello
        if not data:
            self._lost()
            return
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("op") == "ended":
                self._ended(str(msg.get("id")))
        if len(self._buffer) > logkeeper.MAX_LINE:
            self._buffer = b""  # never a line of ours: drop it rather than grow

    def _ended(self, stream_id: str) -> None:
        kept = self.streams.pop(stream_id, None)
        if kept is not None:
            os.close(kept.fd)
            kept.done.set()

    # -- a keeper that died --------------------------------------------------------------------

    def _unregister(self) -> None:
        """Stop reading the keeper's socket and close it (also from a loop already stopped)."""
        assert self._sock is not None
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._unregister()
        if self._popen is not None:
            self.system.kill_and_reap(self._popen, what="log keeper")
            self._popen = None
        self.pid = None

    def _lost(self) -> None:
        pid = self.pid
        self._disconnect()
        if self._closed or not self.streams:
            return
        now = time.monotonic()
        self._deaths = [t for t in self._deaths if now - t < DEATHS_WINDOW_S] + [now]
        log.warning("the log keeper (pid %s) ended; another takes over the output of %d node(s)",
                    pid, len(self.streams))
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        if len(self._deaths) >= DEATHS_IN_A_ROW:
            self._timer = asyncio.get_running_loop().call_later(RESTART_PAUSE_S, self._restart, stamp)
        else:
            self._restart(stamp)

    def _restart(self, since: str) -> None:
        self._timer = None
        if self._closed or self._sock is not None:
            return
        try:
            self._start()
        except OSError as exc:
            log.error("could not start a log keeper (%s); trying again in %.0fs", exc.strerror or exc,
                      RESTART_PAUSE_S)
            self._timer = asyncio.get_running_loop().call_later(RESTART_PAUSE_S, self._restart, since)
            return
        note = (f"--- cadre-desktop: the log keeper ended at {since} and was replaced at "
                f"{datetime.now(UTC).isoformat(timespec='seconds')}; output it had read but not written "
                "(up to 64 KiB) is missing here ---")
        for stream_id, kept in list(self.streams.items()):
            try:
                self._send(stream_id, kept, note)
            except OSError:
                return  # this one died too: its end is seen on the loop and starts the next

    def close(self) -> None:
        """Let go of the keeper (it carries on while a node writes) and of our copies."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sock is not None:
            self._unregister()
        if self._popen is not None:  # it outlives us by nature; reaped when it ends, if we are still here
            threading.Thread(target=self._popen.wait, name="reap-log-keeper", daemon=True).start()
            self._popen = None
        for kept in self.streams.values():
            os.close(kept.fd)
        self.streams.clear()


def _connect(path: Path) -> tuple[socket.socket, int, list[tuple[JSONObject, int]]] | None:
    """Blocking (run on a thread): the keeper at `path`, its pid and the streams it keeps."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ATTACH_TIMEOUT_S)
    fds: list[int] = []
    haves: list[tuple[JSONObject, int]] = []
    try:
        sock.connect(str(path))
        sock.sendall(b'{"op": "hello"}\n')
        buffer = b""
        while True:
            data, got, _flags, _addr = socket.recv_fds(sock, 65536, 64)
            fds.extend(got)
            if not data:
                raise OSError("the log keeper hung up")
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("op") == "ready":
                    return sock, int(msg["pid"]), haves
                if msg.get("op") == "have" and fds:
                    haves.append((msg, fds.pop(0)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, ConnectionRefusedError):
            with contextlib.suppress(OSError):
                path.unlink()  # a keeper that was killed left its socket; ours to tidy (a private folder)
        elif not isinstance(exc, FileNotFoundError):
            log.warning("could not re-attach to the log keeper at %s: %s", path, exc)
        sock.close()
        for fd in fds + [fd for _, fd in haves]:
            os.close(fd)
        return None
