"""hosted-nodes.json: one row per hosted node.

The rules of the file (synchronous on purpose, the cache as the truth while
the host runs, removal tombstones) are those of every row file the host keeps;
see `rowstore`. This one loads first at start-up, so it is the one that clears
the temp files a crash left in the data folder (beside state.json,
control.json and the lending files, which share it).

Version 2 added the home's own id (`home_id`, random, made once), which keys
its keyring entries so two homes of one user never touch each other's, and
`keyring_layout`: 1 while entries of an upgraded home may still be under their
old names, 2 once they were moved (see host/core/vault/secrets.py).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from cadre_desktop.errors import StorageError
from cadre_desktop.host.core.records.jsondoc import Upgrade
from cadre_desktop.host.core.records.records import NodeRecord, is_node_id, record_from_row
from cadre_desktop.host.core.records.rowstore import RowStore
from cadre_desktop.jsontypes import JSONObject

FILE_VERSION = 2
#: Keyring entries named `<home id>/<node id>/<kind>` (1: `<node id>/<kind>`, before home ids).
KEYRING_LAYOUT = 2
HOME_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{7,63}")


def new_home_id() -> str:
    return "h" + secrets.token_hex(8)


def _upgrade_1_to_2(doc: JSONObject) -> JSONObject:
    doc["home_id"] = new_home_id()
    doc["keyring_layout"] = 1  # its entries are still under their old names
    return doc


#: One function per version step: UPGRADES[n] turns a version-n document into n+1.
UPGRADES: dict[int, Upgrade] = {1: _upgrade_1_to_2}


class RecordStore(RowStore[NodeRecord]):
    def __init__(
        self,
        path: Path,
        *,
        version: int = FILE_VERSION,
        upgrades: Mapping[int, Upgrade] | None = None,
    ) -> None:
        super().__init__(
            path,
            what="records",
            key="nodes",
            parse=record_from_row,
            is_id=is_node_id,
            version=version,
            upgrades=UPGRADES if upgrades is None else upgrades,
            clears_interrupted_writes=True,
        )
        self._home_id: str | None = None
        self._keyring_layout = KEYRING_LAYOUT

    def _read_top(self, doc: JSONObject | None, *, upgraded: bool) -> None:
        if doc is None:
            self._home_id, self._keyring_layout = new_home_id(), KEYRING_LAYOUT
            return
        home_id, layout = doc.get("home_id"), doc.get("keyring_layout", KEYRING_LAYOUT)
        if home_id is None and (upgraded or self._version < 2):
            home_id = new_home_id()  # made now; written with the upgraded file
        if not isinstance(home_id, str) or not HOME_ID.fullmatch(home_id):
            raise StorageError(f"the records file {self.path} has no valid 'home_id'; it was left as it is")
        if layout not in (1, KEYRING_LAYOUT):
            raise StorageError(f"the records file {self.path} has a bad 'keyring_layout'; it was left as it is")
        self._home_id, self._keyring_layout = home_id, 1 if layout == 1 else KEYRING_LAYOUT

    def _top(self) -> JSONObject:
        if self._version < 2:
            return {}
        return {"home_id": self._home_id, "keyring_layout": self._keyring_layout}

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

    def save_upgrade(self) -> None:
        """Write an upgraded file now (its backup kept), so its new home id is on disk
        before any keyring entry is named after it."""
        self.load()
        if self._upgraded_from is not None:
            self._save(self.load())

    def persist_home(self) -> None:
        """Write the file now if it does not exist yet, so the home id is on disk before a
        keyring entry is named after it (a home that only lends has no node to write it)."""
        self.load()
        if not self.path.exists():
            self._save(self.load())

    def keyring_moved(self) -> None:
        """Every old-form keyring entry of this home has its new name now."""
        self.load()
        if self._keyring_layout != KEYRING_LAYOUT:
            self._keyring_layout = KEYRING_LAYOUT
            self._save(self.load())

