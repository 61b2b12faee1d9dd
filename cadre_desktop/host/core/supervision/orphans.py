"""Orphans: live children that no record names (seed 000).

A host that re-attaches to what the last one left may find a child whose record is gone (a
records file restored from a backup, a removal that died half-way). It is not this host's to
stop: it is reported once at start and left running, also at Quit. A person reclaims it with
Remove of its id, which stops it and deletes its data (its work folder, log and keyring
entries: the seed's words), as a Remove of a record does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from cadre_desktop.errors import StorageError
from cadre_desktop.host.core.driver import InstanceInfo, NodeDriver
from cadre_desktop.host.core.records.lifecycle import AnyLife

log = logging.getLogger(__name__)


def find_orphans(driver: NodeDriver, lifecycles: Iterable[AnyLife]) -> list[InstanceInfo]:
    """Every live child whose node no record (of any kind) names, nor a removal in progress.

    A records file that cannot be read names nothing we can trust: then no child is an orphan.
    """
    try:
        known: set[str] = set()
        for lc in lifecycles:
            known.update(r.id for r in lc.rows())
            known.update(lc.pending_removals())
    except StorageError as exc:
        log.error("cannot check for orphaned children: %s", exc.message)
        return []
    return [h for h in driver.list_nodes() if h.alive and h.node_id not in known]


def report(orphans: list[InstanceInfo], *, at_quit: bool = False) -> None:
    """Say so once: at start, and at a Quit that leaves them running."""
    for handle in orphans:
        if at_quit:
            log.warning("the child of node %s (pid %s) is an orphan no record names; it is left running. "
                        "`cadre-desktop node remove %s` stops it.", handle.node_id, handle.pid, handle.node_id)
        else:
            log.warning("a child for node %s (pid %s) runs but no record names it; it is left running. "
                        "`cadre-desktop node remove %s` stops it and deletes its data.",
                        handle.node_id, handle.pid, handle.node_id)
