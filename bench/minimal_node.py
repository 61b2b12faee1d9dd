"""The least program that keeps the node contract's `GET /status`, for scale runs.

    python -I -S bench/minimal_node.py      (configured by CADRE_* variables)

Listens on CADRE_API_HOST:CADRE_API_PORT and answers every request with the
status JSON of an unclaimed node; SIGTERM ends it. Standard library only and no
`site`, so it starts in a few milliseconds where the reference node needs a few
hundred (aiohttp, cryptography): a hundred of these show what the host itself
costs, not what a hundred Python web servers cost to start.
"""

import json
import os
import selectors
import signal
import socket
import sys
from typing import cast


def main() -> int:
    host = os.environ["CADRE_API_HOST"]
    port = int(os.environ["CADRE_API_PORT"])
    body = json.dumps({
        "node_id": os.environ.get("CADRE_NODE_ID", ""), "peer_id": "minimal-" + os.environ.get("CADRE_NODE_ID", ""),
        "state": "unclaimed", "cadre": None, "error": None, "version": "minimal",
    }).encode()
    reply = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is server:
                conn, _ = server.accept()
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ)
                continue
            conn = cast(socket.socket, key.fileobj)  # only sockets are registered
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            if data:
                try:
                    conn.sendall(reply)
                except OSError:
                    pass
            sel.unregister(conn)
            conn.close()


if __name__ == "__main__":
    sys.exit(main())
