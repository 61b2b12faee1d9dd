"""One tray app per home: a second launch asks the first to show its window, then exits.

The first instance listens on a local socket named after a hash of the home's
data folder (so two homes, e.g. tests, never meet). A later launch connects,
sends `show`, and waits for `ok`. A stale socket left by a crashed instance is
removed before listening. Two launches racing past each other both listen; the
Host's lock then refuses the second.

On Linux and macOS the socket is a Unix socket (0600) in the temporary folder,
where Qt's QLocalServer put it in earlier versions, so an old and a new version
still find each other; the event loop serves it, and the tray app never loads
QtNetwork (about 2.5 MB resident). On Windows it is a named pipe through
QLocalServer and QLocalSocket, and QtNetwork is imported there only.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import sys

from PySide6.QtCore import QObject, Signal

from cadre_desktop.paths import Paths

log = logging.getLogger(__name__)

REQUEST, ANSWER = b"show\n", b"ok\n"
TIMEOUT_MS = 2000
#: Named pipes (Windows) need Qt; everywhere else a Unix socket on the event loop serves.
USE_QT = sys.platform == "win32"


def instance_name(paths: Paths) -> str:
    digest = hashlib.sha256(str(paths.data_dir.resolve()).encode()).hexdigest()[:20]
    return f"cadre-desktop-{digest}"


def socket_path(name: str) -> str:
    """Where QLocalServer puts a socket named `name` on Unix: QDir::tempPath() is $TMPDIR, else /tmp."""
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", name)


def hand_off(name: str, timeout_ms: int = TIMEOUT_MS) -> bool:
    """Ask a running instance to show its window; True if one answered."""
    return _qt_hand_off(name, timeout_ms) if USE_QT else _unix_hand_off(socket_path(name), timeout_ms / 1000)


def _unix_hand_off(path: str, timeout_s: float) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.sendall(REQUEST)
            answer = b""
            while ANSWER not in answer and len(answer) < 64:
                chunk = sock.recv(64)
                if not chunk:
                    break
                answer += chunk
            return ANSWER in answer
    except OSError:  # nobody listens, a stale socket, a timeout
        return False


def _qt_hand_off(name: str, timeout_ms: int) -> bool:
    from PySide6.QtNetwork import QLocalSocket

    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(timeout_ms):
        return False
    sock.write(REQUEST)
    sock.waitForBytesWritten(timeout_ms)
    answered = False
    while not answered and sock.waitForReadyRead(timeout_ms):
        answered = ANSWER in bytes(sock.readAll().data())
    sock.disconnectFromServer()
    return answered


class InstanceServer(QObject):
    """The first instance's side. `listen` needs the running event loop (the Unix socket's)."""

    show_requested = Signal()

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._listener = _QtListener(self) if USE_QT else _UnixListener(self)

    def listen(self) -> bool:
        return self._listener.listen()

    def close(self) -> None:
        self._listener.close()

    def _asked(self, data: bytes) -> bool:
        """What a connection sent; True (and the window shown) if it asked to show it."""
        if REQUEST.strip() not in data:
            return False
        self.show_requested.emit()
        return True


class _UnixListener:
    def __init__(self, owner: InstanceServer) -> None:
        self.owner, self.path = owner, socket_path(owner.name)
        self._sock: socket.socket | None = None
        self._inode = 0
        self._clients: set[socket.socket] = set()

    def listen(self) -> bool:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.path.lexists(self.path):  # a crashed instance's, or an old one's still running
                os.unlink(self.path)
            sock.bind(self.path)
            os.chmod(self.path, 0o600)
            sock.listen(8)
            sock.setblocking(False)
            self._inode = os.stat(self.path).st_ino
        except OSError as exc:
            sock.close()
            log.warning("cannot listen as the single instance (%s): %s", self.path, exc.strerror or exc)
            return False
        self._sock = sock
        loop.add_reader(sock.fileno(), self._accept)
        return True

    def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while self._sock is not None:
            try:
                client, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.debug("single instance: accept failed: %r", exc)
                return
            client.setblocking(False)
            self._clients.add(client)
            loop.add_reader(client.fileno(), self._read, client)

    def _read(self, client: socket.socket) -> None:
        try:
            data = client.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if self.owner._asked(data):
            try:
                client.send(ANSWER)
            except OSError:
                pass
        self._drop(client)  # one request per connection, as the client sends

    def _drop(self, client: socket.socket) -> None:
        asyncio.get_running_loop().remove_reader(client.fileno())
        self._clients.discard(client)
        client.close()

    def close(self) -> None:
        if self._sock is None:
            return
        for client in list(self._clients):
            self._drop(client)
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        try:
            if os.stat(self.path).st_ino == self._inode:  # not a later instance's
                os.unlink(self.path)
        except OSError:
            pass


class _QtListener:
    def __init__(self, owner: InstanceServer) -> None:
        from PySide6.QtNetwork import QLocalServer

        self.owner = owner
        self.server = QLocalServer(owner)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._accept)

    def listen(self) -> bool:
        self.server.removeServer(self.owner.name)
        if not self.server.listen(self.owner.name):
            log.warning("cannot listen as the single instance (%s): %s", self.owner.name, self.server.errorString())
            return False
        return True

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            sock.setParent(self.owner)
            sock.readyRead.connect(lambda s=sock: self._read(s))
            sock.disconnected.connect(sock.deleteLater)

    def _read(self, sock) -> None:
        if self.owner._asked(bytes(sock.readAll().data())):
            sock.write(ANSWER)
            sock.flush()

    def close(self) -> None:
        self.server.close()
