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
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from cadre_desktop.atomicfile import write_json_atomic
from cadre_desktop.errors import StorageError
from cadre_desktop.host.jsondoc import Upgrade, keep_backup, read_versioned, remove_interrupted_writes
from cadre_desktop.host.records import NodeRecord, is_node_id, record_from_row

log = logging.getLogger(__name__)

FILE_VERSION = 1

#: One function per version step: UPGRADES[n] turns a version-n document into n+1.
UPGRADES: dict[int, Upgrade] = {}


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
            return self._cache
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

    def _save(self, nodes: dict[str, NodeRecord], removing: dict[str, str] | None = None) -> None:
        removing = self._removing if removing is None else removing
        doc: dict[str, Any] = {
            "version": self._version,
            "nodes": {node_id: rec.to_row() for node_id, rec in sorted(nodes.items())},
        }
        if removing:
            doc["removing"] = dict(sorted(removing.items()))
        try:
            if self._upgraded_from is not None:
                keep_backup(self.path, self._upgraded_from)
            write_json_atomic(self.path, doc)
        except OSError as exc:
            raise StorageError(
                f"could not save the records file {self.path}: {exc.strerror or exc}. "
                "The previous file is intact; free some disk space and try again."
            ) from None
        self._upgraded_from = None

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
