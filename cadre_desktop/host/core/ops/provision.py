"""Bringing a new supervised record to life: row, then keyring, then child, or undone.

One protocol for every kind (a hosted node, a lent node). The row is written first, in
its kind's creating status: if the host dies after it, that half-born row is what the
reap sweep finds and clears, keyring entry included (the other order would leave a
secret no row names, which nothing could ever find again). Then the secret goes to the
keyring, off the serial queue. The row is re-read right before the start: one that was
removed (or changed) meanwhile gets no child. Then the first child (awaited: it comes up
on a thread while the loop goes on), and one write naming it, which re-reads the row: one
removed or changed while the child came up is unwound, its child with it (a Remove that
lands meanwhile waits for the start in flight and stops that child itself). Whatever fails
on the way is undone by the kind's `unwind`: told whether
the secret reached the keyring (if not, only the row exists), it removes the row behind a
tombstone, stops the child, deletes the folder and the entry, so a host that dies
half-way through finishes the job at its next start.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic

from cadre_desktop.host.core.driver import InstanceInfo
from cadre_desktop.host.core.records.lifecycle import Lifecycle, R
from cadre_desktop.host.core.supervision.starts import Starter
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretKind

#: Undo a half-done creation of the row `id`; `stored`: its secret reached the keyring.
Unwind = Callable[[str, bool], Awaitable[None]]


@dataclass(frozen=True)
class Born(Generic[R]):
    """A record that came to life: its row as written with its first child, and the child."""

    record: R
    child: InstanceInfo


class Provisioning(Generic[R]):
    """Row → keyring → child for one kind of record (its lifecycle), with its undoing."""

    def __init__(self, *, lifecycle: Lifecycle[R], gate: KeyringGate, starter: Starter,
                 before_keyring: Callable[[], None] = lambda: None) -> None:
        self.lifecycle = lifecycle
        self.gate = gate
        #: The first child's start, as every start (`starts.Starter.launch`, `spawned`).
        self.starter = starter
        #: Called right before the secret is stored (the home id that names it must be on disk).
        self.before_keyring = before_keyring

    async def create(self, record: R, kind: SecretKind, secret: str, *, unwind: Unwind,
                     gone: Callable[[], Exception], still_wanted: Callable[[R], None] = lambda row: None,
                     **first_start: object) -> Born[R]:
        """Bring `record` (in its kind's creating status) to life; `first_start` are the fields
        the first child's write sets besides its handle and ports. `gone()` is the error for a row
        removed meanwhile; `still_wanted(row)` raises where the kind no longer wants it (a loan
        whose grant closed during the keyring's write). Raises what failed, after `unwind`
        undid what was done."""
        lc, row_id = self.lifecycle, record.id
        lc.create(record)
        try:
            self.before_keyring()
            await self.gate.store(row_id, kind, secret)
        except BaseException:
            await unwind(row_id, False)
            raise
        try:
            current = lc.get(row_id)
            # No await from this re-read to the start; the write after it re-reads (`spawned`).
            if current is None or current.status is not lc.kind.creating or self.gate.cached(row_id, kind) is None:
                raise gone()
            still_wanted(current)
            child = await self.starter.launch(lc, current, secret, 1)
            born: R | None = self.starter.spawned(lc, row_id, child, **first_start)
            if born is None:
                raise gone()
        except BaseException:
            await unwind(row_id, True)
            raise
        return Born(born, child)
