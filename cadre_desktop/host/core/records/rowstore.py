"""One versioned JSON file of rows keyed by id: hosted nodes, grants, donations.

Every method is synchronous on purpose. The engine re-reads a row and writes
it back with no `await` in between; that is only atomic against the event
loop because get/put cannot yield. An async write path here would quietly
reopen the races the re-reads close (a removed row brought back by a stale
write-back), and nothing else would notice.

The cache is the truth while the host runs; the file is rewritten whole on each
change (fine for a household's handful of rows, and for a hundred).

Its writes may run on the host's writer thread (`use_writer`, `groupwriter.py`): a
`put` still waits for its sync (its caller answers someone), while `put_soon`, for
what the supervisor and the probe learn (a start, an answer), changes the cache at
once and tells its caller after the sync, so a storm of respawns is a few grouped
writes instead of one synced write per start on the loop. A `put_soon` that fails
leaves the row in memory (the truth of what runs), names it `unsaved` and tries the
whole file again every `RESAVE_S` until a write succeeds.

Removal leaves a tombstone: `mark_removed` takes a row out and, in the same
write, names its id under `removing`; `removal_done` drops the name once what
the row owned (a child, a work folder, keyring entries) is gone. A host killed
between the two finds the name at its next start and finishes the job, so a
crash never leaves a child or a keyring secret that no row names. The key is
written only while a removal is pending; older builds ignore it.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from cadre_desktop.errors import StorageError
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.core.records.jsondoc import Upgrade, keep_backup, read_versioned, remove_interrupted_writes
from cadre_desktop.jsontypes import JSONObject

log = logging.getLogger(__name__)


class Row(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def created_at(self) -> str: ...

    def to_row(self) -> JSONObject: ...


R = TypeVar("R", bound=Row)

#: How soon a failed `put_soon` is written again (the whole file, as it is then).
RESAVE_S = 1.0


class RowStore(Generic[R]):
    """Rows of one kind in one file: `{"version": n, <key>: {id: row}, "removing": {...}}`."""

    def __init__(
        self,
        path: Path,
        *,
        what: str,
        key: str,
        parse: Callable[[str, object], R],
        is_id: Callable[[object], bool],
        version: int,
        upgrades: Mapping[int, Upgrade],
        clears_interrupted_writes: bool = False,
    ) -> None:
        self.path = path
        self._what, self._key = what, key
        self._parse, self._is_id = parse, is_id
        self._version = version
        self._upgrades = upgrades
        self._clears = clears_interrupted_writes
        self._cache: dict[str, R] | None = None
        #: Ids removed from the rows whose clean-up is not known to be finished.
        self._removing: dict[str, str] = {}
        self._upgraded_from: int | None = None
        #: Why the last save failed (None once one succeeds): views show it beside the live truth.
        self.save_error: str | None = None
        self._writer: GroupWriter | None = None
        #: Rows changed by a `put_soon` whose write failed, not yet in the file.
        self.unsaved: set[str] = set()
        self._resave: asyncio.TimerHandle | None = None
        #: `put_soon` writes not synced (nor failed) yet, and who waits for none to be left.
        self._in_flight = 0
        self._settled: list[asyncio.Future[None]] = []

    def use_writer(self, writer: GroupWriter | None) -> None:
        """Write on `writer`'s thread from now on (None: on the caller's, as in unit tests,
        and after the host's stop: no write is tried again then)."""
        self._writer = writer
        if writer is None and self._resave is not None:
            self._resave.cancel()
            self._resave = None

    @property
    def grouped(self) -> bool:
        """Whether `put_soon` may be used (else callers use `put`): a writer, and no upgrade
        whose backup the next write must keep first."""
        return self._writer is not None and self._upgraded_from is None

    def load(self) -> dict[str, R]:
        """Load once and cache. A missing file is an empty store; a bad one raises.

        The store that clears interrupted writes loads first, at host start-up,
        under the home's lock and before anything writes, so it may clear the temp
        files a crash left beside the files of the folder.
        """
        if self._cache is not None:
            return self._cache
        if self._clears:
            remove_interrupted_writes(self.path.parent)
        doc, found = read_versioned(
            self.path, what=self._what, current=self._version, upgrades=self._upgrades
        )
        if doc is None:
            self._cache, self._removing = {}, {}
            self._read_top(None, upgraded=False)
            return self._cache
        self._read_top(doc, upgraded=found is not None and found < self._version)
        removing = doc.get("removing", {})
        if not isinstance(removing, dict) or not all(
                self._is_id(k) and isinstance(v, str) for k, v in removing.items()):
            raise StorageError(
                f"the {self._what} file {self.path} has a bad 'removing' object; it was left as it is"
            )
        rows = doc.get(self._key)
        if not isinstance(rows, dict):
            raise StorageError(
                f"the {self._what} file {self.path} has no '{self._key}' object; it was left as it is"
            )
        cache: dict[str, R] = {}
        for row_id, row in rows.items():
            try:
                cache[row_id] = self._parse(row_id, row)
            except ValueError as exc:
                raise StorageError(
                    f"the {self._what} file {self.path} has a bad row: {exc}; it was left as it is"
                ) from None
        if found is not None and found < self._version:
            self._upgraded_from = found
        self._cache = cache
        self._removing = {k: v for k, v in removing.items() if isinstance(v, str)}  # all are, checked above
        return cache

    def _read_top(self, doc: JSONObject | None, *, upgraded: bool) -> None:
        """Read the file's own fields beside its rows (None: there is no file yet); for subclasses."""

    def _top(self) -> JSONObject:
        """The file's own fields to write beside its rows; for subclasses."""
        return {}

    def _doc(self, rows: dict[str, R], removing: dict[str, str]) -> JSONObject:
        doc: JSONObject = {
            "version": self._version,
            self._key: {row_id: row.to_row() for row_id, row in sorted(rows.items())},
            **self._top(),
        }
        if removing:
            doc["removing"] = dict(sorted(removing.items()))
        return doc

    def _writing(self, doc: JSONObject | Callable[[], JSONObject]) -> Callable[[], None]:
        """The write of `doc`, or of the doc `doc()` makes on the writer's thread."""
        path = self.path

        def write() -> None:
            # Compact (the C encoder): a storm of restarts spent most of its loop time indenting JSON.
            write_json_atomic(path, doc() if callable(doc) else doc, compact=True)
        return write

    def _error(self, exc: OSError) -> StorageError:
        return StorageError(
            f"could not save the {self._what} file {self.path}: {exc.strerror or exc}. "
            "The previous file is intact; free some disk space and try again."
        )

    def _save(self, rows: dict[str, R], removing: dict[str, str] | None = None) -> None:
        removing = self._removing if removing is None else removing
        write = self._writing(self._doc(rows, removing))
        try:
            if self._upgraded_from is not None:
                keep_backup(self.path, self._upgraded_from)
            if self._writer is None:
                write()
            else:  # behind the grouped writes already asked, so the file never goes back
                self._writer.write_now(self.path, write)
        except OSError as exc:
            error = self._error(exc)
            self.save_error = error.message
            raise error from None
        self._upgraded_from = None
        self.save_error = None
        self.unsaved.clear()  # the file holds every row in memory now

    def put_soon(self, row: R, then: Callable[[StorageError | None], None]) -> None:
        """Insert or replace a row now; write it on the writer's thread and call `then(error)`
        on the loop once it is synced (or failed: the row stays, `unsaved`, and is written again)."""
        if self._writer is None or self._upgraded_from is not None:
            raise RuntimeError("put_soon needs a writer and an upgraded file; use put")
        rows = dict(self.load())
        rows[row.id] = row
        self._cache = rows
        self._write_soon(row.id, then)

    def _write_soon(self, row_id: str | None, then: Callable[[StorageError | None], None]) -> None:
        assert self._writer is not None
        # The rows, the tombstones and the rows themselves are never changed in place (each change
        # makes new ones), so the doc is made on the writer's thread, and only for a write that runs.
        rows, removing, top = self.load(), self._removing, self._top()
        write = self._writing(lambda: {**self._doc(rows, removing), **top})

        def written(exc: BaseException | None) -> None:
            error = self._written(row_id, exc)
            self._in_flight -= 1
            if not self._in_flight:
                for waiter in self._settled:
                    if not waiter.done():
                        waiter.set_result(None)
                self._settled.clear()
            then(error)
        self._in_flight += 1
        self._writer.submit_then(self.path, write, written)

    async def settled(self) -> None:
        """Return once no `put_soon` is in flight: what a view of the rows shows then is in
        the file, or its save error is known (an answer never shows an unsynced start)."""
        if self._in_flight:
            waiter = asyncio.get_running_loop().create_future()
            self._settled.append(waiter)
            await waiter

    def _written(self, row_id: str | None, exc: BaseException | None) -> StorageError | None:
        if exc is None:
            self.save_error = None
            self.unsaved.clear()
            return None
        error = self._error(exc) if isinstance(exc, OSError) else StorageError(f"could not save {self.path}: {exc}")
        if self.save_error is None:
            log.error("%s", error.message)
        self.save_error = error.message
        if row_id is not None:
            self.unsaved.add(row_id)
        if self._resave is None:
            self._resave = asyncio.get_running_loop().call_later(RESAVE_S, self._write_again)
        return error

    def _write_again(self) -> None:
        self._resave = None
        if self.unsaved and self._writer is not None:
            self._write_soon(None, lambda error: None)

    def get(self, row_id: str) -> R | None:
        return self.load().get(row_id)

    def list(self) -> list[R]:
        return sorted(self.load().values(), key=lambda r: (r.created_at, r.id))

    def put(self, row: R) -> None:
        """Insert or replace a row. The cache changes only if the file was written."""
        rows = dict(self.load())
        rows[row.id] = row
        self._save(rows)
        self._cache = rows

    def remove(self, row_id: str) -> bool:
        rows = dict(self.load())
        if row_id not in rows:
            return False
        del rows[row_id]
        self._save(rows)
        self._cache = rows
        return True

    def mark_removed(self, row_id: str, when: str = "") -> bool:
        """Take the row out and leave a tombstone, in one write. False if there was no row."""
        rows = dict(self.load())
        if row_id not in rows:
            return False
        del rows[row_id]
        removing = {**self._removing, row_id: when}
        self._save(rows, removing)
        self._cache, self._removing = rows, removing
        return True

    def mark_orphan_removed(self, row_id: str, when: str = "") -> None:
        """A tombstone for an id no row names whose data is to go (an orphan's, seed 000), in one
        write: a host that dies before the clean-up ends finishes it, as a row's removal."""
        rows = self.load()
        if row_id in rows or row_id in self._removing:
            return
        removing = {**self._removing, row_id: when}
        self._save(rows, removing)
        self._removing = removing

    def removal_done(self, row_id: str) -> None:
        """Drop the tombstone: what the row owned is gone."""
        rows = self.load()
        if row_id not in self._removing:
            return
        removing = {k: v for k, v in self._removing.items() if k != row_id}
        self._save(rows, removing)
        self._removing = removing

    def knows(self, row_id: str) -> bool:
        """Whether this store has or had (a pending removal) a row of this id."""
        return row_id in self.load() or row_id in self._removing

    def pending_removals(self) -> builtins.list[str]:
        """Ids whose removal a crash (or a failing keyring) left unfinished."""
        self.load()
        return sorted(self._removing)
