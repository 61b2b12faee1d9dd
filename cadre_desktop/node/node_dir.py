"""The node's work folder: created if missing, checked writable, and locked.

The lock (an exclusive ``flock`` on ``node.lock``) makes a second process started on
the same folder fail with a clear message instead of two processes overwriting each
other's state. The kernel drops it when the process dies, even by SIGKILL, so a
respawn is never blocked by a stale lock. A holder that is being killed (the host
ends what a crashed node left behind just before it respawns it) may take a moment
to die, so the lock is waited for a short while before giving up. The holder writes
its pid into the file, so the host and the error message can name it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cadre_desktop.node.errors import NodeDirError

LOCK_FILE = "node.lock"
#: How long a start waits for another process to let go of the lock.
LOCK_WAIT_S = 3.0
_LOCK_POLL_S = 0.05


def prepare_node_dir(node_dir: Path) -> int:
    """Make ``node_dir`` usable and lock it; returns the lock's descriptor.

    Keep the descriptor open for the life of the process: closing it unlocks.
    """
    try:
        node_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise NodeDirError(f"CADRE_NODE_DIR {node_dir} exists and is not a folder") from None
    except OSError as err:
        raise NodeDirError(f"cannot create CADRE_NODE_DIR {node_dir}: {err.strerror}") from None
    if not node_dir.is_dir():
        raise NodeDirError(f"CADRE_NODE_DIR {node_dir} is not a folder")
    try:
        fd = os.open(node_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:
        raise NodeDirError(f"cannot write in CADRE_NODE_DIR {node_dir}: {err.strerror}") from None
    if not os.access(node_dir, os.W_OK):
        os.close(fd)
        raise NodeDirError(f"cannot write in CADRE_NODE_DIR {node_dir}: permission denied")
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; the host runs one process per folder
        return fd
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() >= deadline:
                holder = _written_pid(fd)
                os.close(fd)
                who = f" (pid {holder})" if holder else ""
                raise NodeDirError(
                    f"CADRE_NODE_DIR {node_dir} is in use by another node process{who}"
                ) from None
            time.sleep(_LOCK_POLL_S)
    try:
        # One fixed-width write over what any start wrote before (a pid is at most 7 digits; readers
        # strip): no truncate, which on ext4 cost every start 0.1-0.5 ms, on a respawn's path.
        os.pwrite(fd, f"{os.getpid():<15}\n".encode("ascii"), 0)
    except OSError:
        pass  # the pid is a courtesy; the lock is what matters
    return fd


def _written_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
