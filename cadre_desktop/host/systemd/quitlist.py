"""The clean-quit list: which nodes the last host stopped on purpose (a Quit that stopped them).

systemd does not know why a unit stopped, so the driver keeps this one list itself, in
`systemd-units.json` beside the records (0600, versioned, atomic): written at a Quit that
stops the nodes, read once by the next host's `init` and then emptied, so starting those
nodes again spends no attempt. Nothing else of a unit is written: the manager is the
unit's book.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.host.core.records.jsondoc import read_versioned

log = logging.getLogger(__name__)

VERSION = 1
FILE_NAME = "systemd-units.json"


def read_once(path: Path) -> frozenset[str]:
    """The nodes the last host stopped cleanly; the list is emptied as it is read."""
    try:
        doc, _version = read_versioned(path, what="the systemd driver's clean-quit list", current=VERSION, upgrades={})
    except Exception as exc:  # a broken list costs at most attempts, never a start
        log.error("%s", exc)
        return frozenset()
    if doc is None:
        return frozenset()
    names = doc.get("stopped_cleanly")
    found = frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()
    if found:
        write(path, [])
    return found


def write(path: Path, node_ids: list[str]) -> None:
    try:
        write_json_atomic(path, {"version": VERSION, "stopped_cleanly": sorted(node_ids)})
    except OSError as exc:
        log.error("could not write %s: %s", path, exc.strerror or exc)
