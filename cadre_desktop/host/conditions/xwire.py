"""The X server's idle time over the X11 protocol itself, where libXss is not installed.

The in-use source asks the MIT-SCREEN-SAVER extension (`XScreenSaverQueryInfo`) through
libXss.so.1 when it can (`idle.XssLib`); a machine with an X server but without that small
library (a fresh Debian with only what Qt needs) read "unknown" although its server offers
the extension (issue 39). This module asks the server the same question with no library:
it connects to the display's socket, authenticates with the display's MIT-MAGIC-COOKIE-1
from `XAUTHORITY` (else `~/.Xauthority`) when there is one, reads the first screen's root
window from the server's set-up answer, asks for the extension's opcode (`QueryExtension`)
and then for the idle time (`ScreenSaverQueryInfo`). Three round trips, a connection per
question (closed after it, as the ctypes way does), every read bounded in size and time.

Displays: `:N[.S]` and `unix:N` (the abstract socket `@/tmp/.X11-unix/XN`, then the path),
an absolute socket path (XQuartz), and `host:N` over TCP (port 6000 + N, as SSH forwards it).
Every failure is an `OSError` in words (the source then reads unknown, or tries the next way).
"""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

from cadre_desktop.text import one_line

#: How long connecting and each answer may take.
TIMEOUT_S = 2.0
#: The set-up answer's bound (a server's vendor, formats and screens: a few kilobytes).
MAX_SETUP_BYTES = 1 << 20
#: An Xauthority file's bound.
MAX_AUTH_BYTES = 1 << 20
COOKIE = b"MIT-MAGIC-COOKIE-1"
EXTENSION = b"MIT-SCREEN-SAVER"
QUERY_EXTENSION = 98
SCREEN_SAVER_QUERY_INFO = 1
FAMILY_LOCAL, FAMILY_WILD = 256, 65535
DISPLAY = re.compile(r"^(?P<host>[^:]*):(?P<number>\d+)(?:\.(?P<screen>\d+))?$")


def _pad(n: int) -> int:
    return (4 - n % 4) % 4


def _padded(data: bytes) -> bytes:
    return data + b"\0" * _pad(len(data))


def parse_display(display: str) -> tuple[str, str]:
    """(host, display number): host "" for the local socket, or an absolute socket path with number ""."""
    if display.startswith("/"):
        path, _, number = display.rpartition(":")
        return (path, number) if path and number.isdigit() else (display, "")
    found = DISPLAY.match(display)
    if found is None:
        raise OSError(f"cannot read the display name {display[:40]!r}")
    host = found["host"]
    return ("" if host in ("", "unix") else host), found["number"]


def _connect(host: str, number: str) -> socket.socket:
    if host and not host.startswith("/"):
        return socket.create_connection((host, 6000 + int(number)), timeout=TIMEOUT_S)
    path = host or f"/tmp/.X11-unix/X{number}"
    candidates = [path] if host else ["\0" + path, path]  # Linux's abstract socket first, as Xlib
    failure: OSError | None = None
    for address in candidates:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT_S)
        try:
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            failure = exc
    raise OSError(f"cannot connect to display :{number}: {failure}")


def auth_entries(data: bytes) -> Iterator[tuple[int, bytes, bytes, bytes, bytes]]:
    """An Xauthority file's entries: (family, address, display number, auth name, auth data)."""
    at = 0
    while at + 2 <= len(data):
        family = struct.unpack_from(">H", data, at)[0]
        at += 2
        fields: list[bytes] = []
        for _ in range(4):
            if at + 2 > len(data):
                return
            size = struct.unpack_from(">H", data, at)[0]
            fields.append(data[at + 2:at + 2 + size])
            at += 2 + size
        yield family, fields[0], fields[1], fields[2], fields[3]


def read_cookie(number: str, auth_file: Path, hostname: str) -> bytes:
    """The MIT-MAGIC-COOKIE-1 of this display in an Xauthority file (b"" when none is there)."""
    try:
        with open(auth_file, "rb") as fh:
            data = fh.read(MAX_AUTH_BYTES)
    except OSError:
        return b""
    for family, address, display, name, cookie in auth_entries(data):
        ours = family == FAMILY_WILD or (family == FAMILY_LOCAL and address == hostname.encode())
        if name == COOKIE and display in (number.encode(), b"") and ours:
            return cookie
    return b""


def _auth_file() -> Path:
    named = os.environ.get("XAUTHORITY")
    return Path(named) if named else Path.home() / ".Xauthority"


def _recv(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the X server closed the connection")
        data += chunk
    return bytes(data)


def _set_up(sock: socket.socket, cookie: bytes) -> int:
    """The connection's set-up; the first screen's root window."""
    name = COOKIE if cookie else b""
    sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(cookie)) + _padded(name) + _padded(cookie))
    head = _recv(sock, 8)
    status, reason_size, _major, _minor, words = struct.unpack("<BBHHH", head)
    if words * 4 > MAX_SETUP_BYTES:
        raise OSError("the X server's set-up answer is too large")
    body = _recv(sock, words * 4)
    if status != 1:
        reason = one_line(body[:reason_size if status == 0 else len(body)].decode("ascii", "replace"), 120)
        raise OSError(f"the X server refused the connection: {reason or 'no reason given'}")
    vendor_size, = struct.unpack_from("<H", body, 16)
    screens, formats = body[20], body[21]
    root_at = 32 + vendor_size + _pad(vendor_size) + 8 * formats
    if screens < 1 or root_at + 4 > len(body):
        raise OSError("the X server's set-up answer has no screen")
    return int(struct.unpack_from("<I", body, root_at)[0])


def _reply(sock: socket.socket) -> bytes:
    """The next reply (events, which we never asked for, skipped); an X error as OSError."""
    for _ in range(64):
        packet = _recv(sock, 32)
        if packet[0] == 1:
            extra, = struct.unpack_from("<I", packet, 4)
            if extra:
                _recv(sock, min(extra * 4, MAX_SETUP_BYTES))
            return packet
        if packet[0] == 0:
            raise OSError(f"the X server answered with error {packet[1]}")
    raise OSError("no reply from the X server")


def idle_ms(display: str, hostname: str | None = None) -> int:
    """Milliseconds since the last input the X server `display` saw (MIT-SCREEN-SAVER)."""
    host, number = parse_display(display)
    cookie = read_cookie(number, _auth_file(), hostname or socket.gethostname()) if number else b""
    with _connect(host, number) as sock:
        root = _set_up(sock, cookie)
        request = struct.pack("<BxHHxx", QUERY_EXTENSION, 2 + len(_padded(EXTENSION)) // 4, len(EXTENSION))
        sock.sendall(request + _padded(EXTENSION))
        answer = _reply(sock)
        if not answer[8]:
            raise OSError(f"display {display} has no MIT-SCREEN-SAVER extension")
        sock.sendall(struct.pack("<BBHI", answer[9], SCREEN_SAVER_QUERY_INFO, 2, root))
        info = _reply(sock)
        return int(struct.unpack_from("<I", info, 16)[0])
