"""A member's data folder, judged before the member is started on it.

Three answers: `NEW` (absent or empty: a member may be made in it), `EXISTING` (a member's
write-ahead log and database are there and look like etcd's: the member restarts on them,
its cluster flags ignored by etcd), or `EtcdDataCorrupt` naming what is wrong. A damaged
folder is never moved away or re-created here: a new member over a healthy cluster's old
name would be refused by its peers at best, and a lone member re-created empty would lose
the fleet's state. Damage this check cannot see (a torn log record) etcd finds at start;
`log_says_corrupt` reads its words for that.

bbolt (etcd's database) starts with two meta pages; each carries the magic `0xED0CDAED`
16 bytes in (after the page header). A database with neither is not one.
"""

from __future__ import annotations

import enum
import struct
from pathlib import Path

from cadre_desktop.host.fleetstate.errors import EtcdDataCorrupt

BOLT_MAGIC = 0xED0CDAED
#: Where each meta page's magic sits, for the page sizes etcd runs with.
_MAGIC_AT = (16, 4096 + 16, 16384 + 16, 65536 + 16)
#: Words of etcd's log (at its start) that mean its data is damaged.
CORRUPT_WORDS = ("crc mismatch", "corrupt", "failed to recover", "unexpected EOF", "invalid database",
                 "file size too small", "failed to open database", "wal: slice bounds out of range")


class DataState(enum.Enum):
    NEW = "new"
    EXISTING = "existing"


def _bolt_ok(db: Path) -> bool:
    try:
        with db.open("rb") as f:
            head = f.read(_MAGIC_AT[-1] + 4)
    except OSError:
        return False
    return any(len(head) >= at + 4 and struct.unpack_from("<I", head, at)[0] == BOLT_MAGIC for at in _MAGIC_AT)


def check_data_dir(data_dir: Path) -> DataState:
    """What `data_dir` holds: NEW, EXISTING, or EtcdDataCorrupt (the folder left untouched)."""
    if not data_dir.exists() or not any(data_dir.iterdir()):
        return DataState.NEW
    member = data_dir / "member"
    where = f"the etcd data folder {data_dir}"
    if not member.is_dir():
        raise EtcdDataCorrupt(f"{where} holds files but no member: it is left as it is; move it away"
                              " only if this computer's etcd member should start anew")
    wals = sorted((member / "wal").glob("*.wal")) if (member / "wal").is_dir() else []
    if not wals or all(w.stat().st_size == 0 for w in wals):
        raise EtcdDataCorrupt(f"{where} has no write-ahead log: the member's data is damaged and left as it is")
    db = member / "snap" / "db"
    if not db.is_file():
        raise EtcdDataCorrupt(f"{where} has no database (member/snap/db): the member's data is damaged"
                              " and left as it is")
    if not _bolt_ok(db):
        raise EtcdDataCorrupt(f"{where} has a database etcd cannot read (member/snap/db is not a bbolt file):"
                              " the member's data is damaged and left as it is")
    return DataState.EXISTING


def log_says_corrupt(line: str) -> bool:
    """Whether a line of etcd's log, at a failed start, says its data is damaged."""
    lowered = line.lower()
    return any(word.lower() in lowered for word in CORRUPT_WORDS)
