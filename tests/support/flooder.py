"""Hold thousands of idle or half-sent TCP connections against one port, from one process.

Run as a program: `python flooder.py HOST PORT COUNT SECONDS [SOURCE_ADDRESS]`.
Opens COUNT non-blocking connections (every other one sends half a request,
headers never finished, the rest send nothing), and for SECONDS keeps the
number up by opening a new one for each the server closes. It prints one line
`flooding` once COUNT connects were made, and at the end (or on SIGINT) a JSON
line with what happened. It raises its own descriptor limit to the hard one first.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import cast

HALF = b"GET /api/nodes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer not-yet"


def main(host: str, port: int, count: int, seconds: float, source: str | None) -> int:
    # The test stops the flood with SIGINT. A suite started in the background (`./scripts/test &`
    # from a script: POSIX shells start such a job with SIGINT ignored, and Python then installs
    # no handler) would pass that on: the flooder ignored the stop, was killed 30 s later and
    # printed no stats. Its own handler, whatever the parent ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "closed_by_server": 0, "connect_failed": 0, "half_sent": 0}
    serial = 0

    def open_one() -> None:
        nonlocal serial
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            if source:
                sock.bind((source, 0))
            code = sock.connect_ex((host, port))
        except OSError:
            sock.close()
            stats["connect_failed"] += 1
            return
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            stats["connect_failed"] += 1
            return
        serial += 1
        sel.register(sock, selectors.EVENT_WRITE, serial % 2 == 0)
        stats["opened"] += 1

    for _ in range(count):
        open_one()
    print("flooding", flush=True)
    end = time.monotonic() + seconds
    try:
        churn(sel, end, stats, open_one)
    except KeyboardInterrupt:  # the test is done with us
        pass
    print(json.dumps(stats), flush=True)
    return 0


def churn(sel: selectors.BaseSelector, end: float, stats: dict, open_one) -> None:
    """Keep `count` connections open until `end`; the stats so far go to $FLOOD_STATS (if set)
    every half second, so a test can wait for what the server did instead of guessing a time."""
    report, written = os.environ.get("FLOOD_STATS"), 0.0
    while time.monotonic() < end:
        if report and time.monotonic() - written >= 0.5:
            Path(report + ".tmp").write_text(json.dumps(stats))
            os.replace(report + ".tmp", report)
            written = time.monotonic()
        for key, events in sel.select(timeout=0.1):
            sock, half = cast(socket.socket, key.fileobj), key.data  # only sockets are registered
            if events & selectors.EVENT_WRITE:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    sel.unregister(sock)
                    sock.close()
                    stats["connect_failed"] += 1
                    open_one()
                    continue
                if half:
                    try:
                        sock.send(HALF)
                        stats["half_sent"] += 1
                    except OSError:
                        pass
                sel.modify(sock, selectors.EVENT_READ, half)
            else:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(sock)
                    sock.close()
                    stats["closed_by_server"] += 1
                    open_one()


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[0], int(args[1]), int(args[2]), float(args[3]), args[4] if len(args) > 4 else None))
