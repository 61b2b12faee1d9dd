"""The floor of respawn latency: the least a Python supervisor can do.

    python bench/floor_supervisor.py PROGRAM [ARGS...]

Starts PROGRAM in a session of its own, waits on a pidfd, and starts it again
the moment it exits: no state, no files, no queue. SIGTERM ends the loop and the
child. Used by bench/respawn.py to show what is left once a supervisor does
nothing but supervise. Linux only (os.pidfd_open).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys


def main() -> int:
    command = sys.argv[1:]
    child: subprocess.Popen | None = None
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    while not stopping:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
        fd = os.pidfd_open(child.pid)
        try:
            while True:
                try:
                    select.select([fd], [], [])
                    break
                except InterruptedError:
                    continue
        finally:
            os.close(fd)
        child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
