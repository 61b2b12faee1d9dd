"""hosted-nodes.json: one row per hosted node.

Every method is synchronous on purpose. The service re-reads a record and
writes it back with no `await` in between; that is only atomic against the
event loop because get/put cannot yield. An async write path here would
quietly reopen the races the re-reads close (a removed node brought back by a
stale write-back), and nothing else would notice.

The cache is the truth while the host runs; the file is rewritten whole on each
change (fine for a household's handful of nodes, and for a hundred).

Removal leaves a tombstone: `mark_removed` takes a row out and, in the same
write, names its id under `removing`; `removal_done` drops the name once the
child, the work folder and the keyring entries are gone. A host killed between
the two finds the name at its next start and finishes the job, so a crash never
leaves a child or a keyring secret that no row names. The key is written only
while a removal is pending; older builds ignore it.

Version 2 added the home's own id (`home_id`, random, made once), which keys
its keyring entries so two homes of one user never touch each other's, and
`keyring_layout`: 1 while entries of an upgraded home may still be under their
old names, 2 once they were moved (see host/secrets.py).
"""

from __future__ import annotations

import logging
import re
import secrets
from pathlib import Path
from typing import Any, Mapping

from cadre_desktop.atomicfile import write_json_atomic
from cadre_desktop.errors import StorageError
from cadre_desktop.host.jsondoc import Upgrade, keep_backup, read_versioned, remove_interrupted_writes
from cadre_desktop.host.records import NodeRecord, is_node_id, record_from_row

log = logging.getLogger(__name__)

FILE_VERSION = 2
#: Keyring entries named `<home id>/<node id>/<kind>` (1: `<node id>/<kind>`, before home ids).
KEYRING_LAYOUT = 2
HOME_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{7,63}")


def new_home_id() -> str:
    return "h" + secrets.token_hex(8)


def _upgrade_1_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    doc["home_id"] = new_home_id()
    doc["keyring_layout"] = 1  # its entries are still under their old names
    return doc


#: One function per version step: UPGRADES[n] turns a version-n document into n+1.
UPGRADES: dict[int, Upgrade] = {1: _upgrade_1_to_2}


class RecordStore:
    def __init__(
        self,
        path: Path,
        *,
        version: int = FILE_VERSION,
        upgrades: Mapping[int, Upgrade] | None = None,
    ) -> None:
        self.path = path
        self._version = version
        self._upgrades = UPGRADES if upgrades is None else upgrades
        self._cache: dict[str, NodeRecord] | None = None
        #: Ids removed from the rows whose clean-up is not known to be finished.
        self._removing: dict[str, str] = {}
        self._upgraded_from: int | None = None
        self._home_id: str | None = None
        self._keyring_layout = KEYRING_LAYOUT
        #: Why the last save failed (None once one succeeds): views show it beside the live truth.
        self.save_error: str | None = None

    def load(self) -> dict[str, NodeRecord]:
        """Load once and cache. A missing file is an empty store; a bad one raises.

        The first load happens at host start-up, under the home's lock and
        before anything writes, so it also clears the temp files a crash left
        beside the records (and beside state.json and control.json, which share
        the folder).
        """
        if self._cache is not None:
            return self._cache
        remove_interrupted_writes(self.path.parent)
        doc, found = read_versioned(
            self.path, what="records", current=self._version, upgrades=self._upgrades
        )
        if doc is None:
            self._cache, self._removing = {}, {}
            self._home_id, self._keyring_layout = new_home_id(), KEYRING_LAYOUT
            return self._cache
        self._read_home(doc, upgraded=found is not None and found < self._version)
        removing = doc.get("removing", {})
        if not isinstance(removing, dict) or not all(
                is_node_id(k) and isinstance(v, str) for k, v in removing.items()):
            raise StorageError(
                f"the records file {self.path} has a bad 'removing' object; it was left as it is"
            )
        nodes = doc.get("nodes")
        if not isinstance(nodes, dict):
            raise StorageError(
                f"the records file {self.path} has no 'nodes' object; it was left as it is"
            )
        cache: dict[str, NodeRecord] = {}
        for node_id, row in nodes.items():
            try:
                cache[node_id] = record_from_row(node_id, row)
            except ValueError as exc:
                raise StorageError(
                    f"the records file {self.path} has a bad row: {exc}; it was left as it is"
                ) from None
        if found is not None and found < self._version:
            self._upgraded_from = found
        self._cache = cache
        self._removing = dict(removing)
        return cache

    def _read_home(self, doc: dict[str, Any], *, upgraded: bool) -> None:
        home_id, layout = doc.get("home_id"), doc.get("keyring_layout", KEYRING_LAYOUT)
        if home_id is None and (upgraded or self._version < 2):
            home_id = new_home_id()  # made now; written with the upgraded file
        if not isinstance(home_id, str) or not HOME_ID.fullmatch(home_id):
            raise StorageError(f"the records file {self.path} has no valid 'home_id'; it was left as it is")
        if layout not in (1, KEYRING_LAYOUT):
            raise StorageError(f"the records file {self.path} has a bad 'keyring_layout'; it was left as it is")
        self._home_id, self._keyring_layout = home_id, layout

    @property
    def home_id(self) -> str:
        """This home's own id, stable for its life (it keys the keyring entries)."""
        self.load()
        assert self._home_id is not None
        return self._home_id

    @property
    def keyring_layout(self) -> int:
        self.load()
        return self._keyring_layout

    def knows(self, node_id: str) -> bool:
        """Whether this home has or had (a pending removal) a node of this id."""
        self.load()
        return node_id in self._cache or node_id in self._removing

    def save_upgrade(self) -> None:
        """Write an upgraded file now (its backup kept), so its new home id is on disk
        before any keyring entry is named after it."""
        self.load()
        if self._upgraded_from is not None:
            self._save(self._cache)

    def keyring_moved(self) -> None:
        """Every old-form keyring entry of this home has its new name now."""
        self.load()
        if self._keyring_layout != KEYRING_LAYOUT:
            self._keyring_layout = KEYRING_LAYOUT
            self._save(self._cache)

    def _save(self, nodes: dict[str, NodeRecord], removing: dict[str, str] | None = None) -> None:
        removing = self._removing if removing is None else removing
        doc: dict[str, Any] = {
            "version": self._version,
            "nodes": {node_id: rec.to_row() for node_id, rec in sorted(nodes.items())},
        }
        if self._version >= 2:
            doc["home_id"] = self._home_id
            doc["keyring_layout"] = self._keyring_layout
        if removing:
            doc["removing"] = dict(sorted(removing.items()))
        try:
            if self._upgraded_from is not None:
                keep_backup(self.path, self._upgraded_from)
            write_json_atomic(self.path, doc, compact=True)
        except OSError as exc:
            error = StorageError(
                f"could not save the records file {self.path}: {exc.strerror or exc}. "
                "The previous file is intact; free some disk space and try again."
            )
            self.save_error = error.message
            raise error from None
        self._upgraded_from = None
        self.save_error = None

    def get(self, node_id: str) -> NodeRecord | None:
        return self.load().get(node_id)

    def list(self) -> list[NodeRecord]:
        return sorted(self.load().values(), key=lambda r: (r.created_at, r.id))

    def put(self, record: NodeRecord) -> None:
        """Insert or replace a row. The cache changes only if the file was written."""
        nodes = dict(self.load())
        nodes[record.id] = record
        self._save(nodes)
        self._cache = nodes

    def remove(self, node_id: str) -> bool:
        nodes = dict(self.load())
        if node_id not in nodes:
            return False
        del nodes[node_id]
        self._save(nodes)
        self._cache = nodes
        return True

    def mark_removed(self, node_id: str, when: str = "") -> bool:
        """Take the row out and leave a tombstone, in one write. False if there was no row."""
        nodes = dict(self.load())
        if node_id not in nodes:
            return False
        del nodes[node_id]
        removing = {**self._removing, node_id: when}
        self._save(nodes, removing)
        self._cache, self._removing = nodes, removing
        return True

    def removal_done(self, node_id: str) -> None:
        """Drop the tombstone: the node's child, folder and keyring entries are gone."""
        self.load()
        if node_id not in self._removing:
            return
        removing = {k: v for k, v in self._removing.items() if k != node_id}
        self._save(self._cache, removing)
        self._removing = removing

    def pending_removals(self) -> list[str]:
        """Ids whose removal a crash (or a failing keyring) left unfinished."""
        self.load()
        return sorted(self._removing)

    def reload(self) -> None:
        """Forget the cache (after the file was fixed by hand)."""
        self._cache = None
        self._removing = {}
        self._home_id = None
