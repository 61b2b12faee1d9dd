"""The reference node, plus a thread that floods its stdout: a node that logs far too much.

CHATTY_BYTES (default 600 MB: 10 MB/s for a minute) of 128-byte log lines are
written at CHATTY_RATE bytes per second (0, the default: as fast as the pipe
takes them), then one line `chatty: done`. Used as `node_command`.
"""

import os
import runpy
import threading
import time

LINE = b"chatty: " + b"x" * 119 + b"\n"
CHUNK = LINE * 512  # 64 KiB


def chatter() -> None:
    total = int(os.environ.get("CHATTY_BYTES", 600_000_000))
    rate = float(os.environ.get("CHATTY_RATE", 0))
    started, written = time.monotonic(), 0
    while written < total:
        view = memoryview(CHUNK)
        while view:
            view = view[os.write(1, view):]
        written += len(CHUNK)
        if rate:
            ahead = written / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    os.write(1, b"chatty: done\n")


threading.Thread(target=chatter, name="chatter", daemon=True).start()
runpy.run_module("cadre_desktop.node", run_name="__main__", alter_sys=True)
