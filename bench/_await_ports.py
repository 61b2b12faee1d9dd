"""Wait until every given port answers GET /status; print when each first did.

    python bench/_await_ports.py TIMEOUT_S PORT[:OLD_PID] ...

Runs in its own process so the polling never holds the GIL of a host under
measurement. A port given with the pid of the child it replaces is polled only
once that pid is gone (a killed child may still hold its socket for a moment).
Prints one JSON object: {"answered": {port: monotonic_ns}, "missing": [ports]}.
"""

from __future__ import annotations

import http.client
import json
import sys
import time


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def answers(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", "/status")
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def main() -> int:
    timeout = float(sys.argv[1])
    pending: dict[int, int | None] = {}
    for arg in sys.argv[2:]:
        port_text, _, pid_text = arg.partition(":")
        pending[int(port_text)] = int(pid_text) if pid_text else None
    answered: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for port, pid in list(pending.items()):
            if pid is not None:
                if not gone(pid):
                    continue
                pending[port] = None
            if answers(port):
                answered[port] = time.monotonic_ns()
                del pending[port]
        time.sleep(0.002)
    json.dump({"answered": answered, "missing": sorted(pending)}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
