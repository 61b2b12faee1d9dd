"""One tray app per home: a second launch asks the first to show its window, then exits.

The first instance listens on a local socket named after a hash of the home's
data folder (so two homes, e.g. tests, never meet). A later launch connects,
sends `show`, and waits for `ok`. A stale socket left by a crashed instance is
removed before listening. Two launches racing past each other both listen; the
Host's lock then refuses the second.
"""

from __future__ import annotations

import hashlib
import logging

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from cadre_desktop.paths import Paths

log = logging.getLogger(__name__)

REQUEST, ANSWER = b"show\n", b"ok\n"
TIMEOUT_MS = 2000


def instance_name(paths: Paths) -> str:
    digest = hashlib.sha256(str(paths.data_dir.resolve()).encode()).hexdigest()[:20]
    return f"cadre-desktop-{digest}"


def hand_off(name: str, timeout_ms: int = TIMEOUT_MS) -> bool:
    """Ask a running instance to show its window; True if one answered."""
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
    show_requested = Signal()

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._accept)

    def listen(self) -> bool:
        QLocalServer.removeServer(self.name)
        if not self.server.listen(self.name):
            log.warning("cannot listen as the single instance (%s): %s", self.name, self.server.errorString())
            return False
        return True

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            sock.setParent(self)
            sock.readyRead.connect(lambda s=sock: self._read(s))
            sock.disconnected.connect(sock.deleteLater)

    def _read(self, sock: QLocalSocket) -> None:
        if REQUEST.strip() in bytes(sock.readAll().data()):
            sock.write(ANSWER)
            sock.flush()
            self.show_requested.emit()

    def close(self) -> None:
        self.server.close()
