"""A node's portable state: what goes to another computer when the node moves there.

The node contract (docs/node-contract.md, §3) keeps a node's identity and claim state in
its `CADRE_NODE_DIR` (the reference node: `identity.json`, `node-state.json`), so the copy
started elsewhere is the same node. A bundle is every regular file at the top of the work
folder but those that belong to one run on one computer (`node.lock`, `lease.json`,
`run.json`, temporary files): at most `MAX_FILES` files of at most `MAX_BYTES` together, or
the move is refused in words. A folder or a link in the work folder is refused too: it is no
state the contract names, and a link could carry the target's files away.

Reading is blocking (call it on a thread, with the node stopped); unpacking checks every name
and size again, because the bundle came over the network, and writes each file 0600,
atomically, into a folder that must be new or empty.
"""

from __future__ import annotations

import base64
import binascii
import re
import stat
from pathlib import Path

from cadre_desktop.errors import Invalid, InvalidState
from cadre_desktop.files.atomicfile import ensure_private_dir, write_bytes_atomic

MAX_FILES = 32
#: Under the fleet link's body limit (64 KiB) once base64 and the record are added.
MAX_BYTES = 40 * 1024
#: Files of one run on one computer, never moved.
LOCAL_ONLY = frozenset({"node.lock", "lease.json", "run.json"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def portable(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and name not in LOCAL_ONLY and not name.endswith((".tmp", ".part"))


def read_bundle(node_dir: Path) -> dict[str, str]:
    """The portable files of `node_dir` (name -> base64), bounded; InvalidState when it cannot move."""
    files: dict[str, str] = {}
    total = 0
    if not node_dir.is_dir():
        return files
    for path in sorted(node_dir.iterdir()):
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode):
            raise InvalidState(f"The node's work folder holds {path.name!r}, which is not a file: it cannot move.")
        if not stat.S_ISREG(info.st_mode) or not portable(path.name):
            continue
        total += info.st_size
        if len(files) >= MAX_FILES or total > MAX_BYTES:
            raise InvalidState(f"The node's work folder holds more than {MAX_FILES} files or"
                               f" {MAX_BYTES // 1024} KB: it cannot move.")
        files[path.name] = base64.b64encode(path.read_bytes()).decode("ascii")
    return files


def check_bundle(files: object) -> dict[str, bytes]:
    """A bundle as received: names and sizes checked again; Invalid when it is not one."""
    if not isinstance(files, dict) or len(files) > MAX_FILES:
        raise Invalid(f"A node's files are a mapping of at most {MAX_FILES} names.")
    out: dict[str, bytes] = {}
    total = 0
    for name, data in files.items():
        if not isinstance(name, str) or not portable(name) or not isinstance(data, str):
            raise Invalid("A node's file has a name a work folder cannot hold.")
        try:
            raw = base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise Invalid("A node's file is not base64.") from None
        total += len(raw)
        if total > MAX_BYTES:
            raise Invalid("A node's files are over the size a move carries.")
        out[name] = raw
    return out


def write_bundle(node_dir: Path, files: dict[str, bytes]) -> None:
    """Write a checked bundle into `node_dir` (made 0700; it must hold nothing yet)."""
    if node_dir.exists() and any(node_dir.iterdir()):
        raise InvalidState(f"A work folder for this node exists here already ({node_dir}); it is left as it is.")
    ensure_private_dir(node_dir)
    for name, raw in files.items():
        write_bytes_atomic(node_dir / name, raw)
