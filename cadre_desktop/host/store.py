"""hosted-nodes.json: one row per hosted node.

The rules of the file (synchronous on purpose, cache as the truth, removal
tombstones) are those of every row file the host keeps; see `rowstore`. This
one loads first at start-up, so it is the one that clears the temp files a
crash left in the data folder (beside state.json, control.json and the
lending files, which share it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from cadre_desktop.host.jsondoc import Upgrade
from cadre_desktop.host.records import NodeRecord, is_node_id, record_from_row
from cadre_desktop.host.rowstore import RowStore

FILE_VERSION = 1

#: One function per version step: UPGRADES[n] turns a version-n document into n+1.
UPGRADES: dict[int, Upgrade] = {}


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
