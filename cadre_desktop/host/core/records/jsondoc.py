"""Versioned JSON files: read strictly, upgrade step by step, never overwrite bad data.

Every file the host keeps has a `version`. Reading one that is unreadable, not
JSON, of the wrong shape or from a newer build raises StorageError naming the
file and the problem, and leaves the file byte-for-byte as it was: losing
records would orphan live children and their keyring secrets.

An older file is upgraded in memory by one function per version step
(`upgrades[n]` turns version n into n+1). Before the first write of the upgraded
document, the original is kept as `<name>.v<n>.bak`.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from cadre_desktop.errors import StorageError
from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.jsontypes import JSONObject, JSONValue, loads

log = logging.getLogger(__name__)

Upgrade = Callable[[JSONObject], JSONObject]

#: The temp files of `atomicfile.write_bytes_atomic`: `.<name>.<8 hex>.tmp`.
_INTERRUPTED_WRITE = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")


#: The largest file of each kind the host will read (a hundred nodes' records are ~100 KiB).
MAX_BYTES = 16 << 20


def read_versioned(
    path: Path,
    *,
    what: str,
    current: int,
    upgrades: Mapping[int, Upgrade],
    max_bytes: int = MAX_BYTES,
) -> tuple[JSONObject | None, int | None]:
    """Return (document at `current` version, version found on disk) or (None, None) if absent.

    Only a regular file is read (never a FIFO, a device or a symbolic link: the
    host writes these files itself), and at most `max_bytes` of it.
    """
    try:
        raw = read_bytes(path, max_bytes=max_bytes, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise StorageError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    if not raw.strip():
        raise StorageError(f"the {what} file {path} is empty; it was left as it is")
    try:
        doc: JSONValue = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StorageError(
            f"the {what} file {path} is not valid JSON ({exc}); it was left as it is"
        ) from None
    if not isinstance(doc, dict):
        raise StorageError(f"the {what} file {path} is not a JSON object; it was left as it is")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StorageError(f"the {what} file {path} has no valid version; it was left as it is")
    if version > current:
        raise StorageError(
            f"the {what} file {path} is version {version}, written by a newer cadre-desktop "
            f"(this one reads up to {current}); update cadre-desktop"
        )
    found = version
    while version < current:
        step = upgrades.get(version)
        if step is None:
            raise StorageError(f"the {what} file {path} is version {version}, which cannot be upgraded")
        try:
            doc = step(dict(doc))
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(
                f"the {what} file {path} could not be upgraded from version {version}: {exc}"
            ) from None
        version += 1
        doc["version"] = version
    return doc, found


def keep_backup(path: Path, version: int) -> None:
    """Copy an about-to-be-upgraded file aside, once, with its permissions."""
    backup = path.with_name(f"{path.name}.v{version}.bak")
    if not backup.exists():
        shutil.copy2(path, backup)


def remove_interrupted_writes(folder: Path) -> list[Path]:
    """Delete the temp files that writes cut short by a crash left in `folder`.

    A SIGKILL between creating a temp file and renaming it over its target
    leaves the target whole (that is the point) and the temp file behind; a host
    killed now and then for months would pile them up. Call this only while
    holding the home's lock, before anything writes: a temp file of a write in
    progress looks exactly the same.
    """
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return removed
    for path in entries:
        if _INTERRUPTED_WRITE.fullmatch(path.name) and path.is_file():
            try:
                path.unlink()
                removed.append(path)
            except OSError as exc:
                log.warning("could not remove %s, left by an interrupted write: %s", path, exc.strerror or exc)
    if removed:
        log.info("removed %d file(s) left by writes a crash interrupted", len(removed))
    return removed
