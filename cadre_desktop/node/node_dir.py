"""The node's work folder: created if missing, checked writable, and locked.

The lock (an exclusive ``flock`` on ``node.lock``) makes a second process started on
the same folder fail at once with a clear message instead of two processes
overwriting each other's state. The kernel drops it when the process dies, even by
SIGKILL, so a respawn is never blocked by a stale lock.
"""

from __future__ import annotations

import os
from pathlib import Path

from cadre_desktop.node.errors import NodeDirError

LOCK_FILE = "node.lock"


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
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise NodeDirError(
            f"CADRE_NODE_DIR {node_dir} is in use by another node process"
        ) from None
    return fd
