"""The keyring as a host condition, not a node failure.

Supervised nodes need their secret to start, but a respawn never asks the
keyring: the gate reads every secret ahead (at start, and in the background
whenever one is wanted), keeps it in this process's memory, and the serial
queue only ever looks in that cache. While the keyring is locked, missing or
hung, the nodes that need a secret *wait*: no attempt is counted, the views
say "waiting for the keyring", and the moment a read succeeds the waiting
nodes are started (`on_ready`). A secret that is truly absent from a working
keyring is different: that node cannot start until it is added again.

Reads are retried with a doubling delay (5 s up to a minute) while the
keyring refuses; a call that hangs is never repeated until it returns, so a
desktop shows at most one unlock prompt at a time.

After any failure the gate keeps trying by itself, on the same delays, until
a call works again (`condition` clears, and the lending reaper and the views
see it): first the clean-ups that failed (`forget` of a revoked grant's token,
of an ended loan's seed token), which it finishes on its own, else a harmless
read. A secret is *missing* only when two reads, CONFIRM_S apart, of a keyring
that works both find nothing: one empty answer (a keyring still loading its
collections, a slow session bus) makes the node wait, never gives it up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cadre_desktop.errors import SecretsError
from cadre_desktop.host.core.events import Listeners
from cadre_desktop.host.core.vault.secrets import NODE_KINDS, SecretKind, SecretStore

log = logging.getLogger(__name__)

RETRY_FIRST_S = 5.0
RETRY_MAX_S = 60.0
#: How far apart two empty answers must be before a secret is taken as missing.
CONFIRM_S = 2.0
#: The entry a probe reads (it never exists; reading it only asks whether the keyring answers).
PROBE_ID = "keyring-probe"


@dataclass(frozen=True)
class KeyringCondition:
    """Why the keyring cannot be used right now (its code and a sentence for a person)."""

    code: str
    message: str


class KeyringGate:
    def __init__(self, secrets: SecretStore, *, sleep: Callable[[float], Awaitable[None]] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.secrets = secrets
        self._sleep = sleep or asyncio.sleep
        self._monotonic = monotonic
        self._cache: dict[tuple[str, SecretKind], str] = {}
        self._missing: set[tuple[str, SecretKind]] = set()
        #: An empty answer not confirmed yet, and when it came.
        self._empty_since: dict[tuple[str, SecretKind], float] = {}
        #: Deletes that failed, finished by the gate once the keyring works again: id -> kinds.
        self._pending: dict[str, set[SecretKind]] = {}
        self._wanted: set[tuple[str, SecretKind]] = set()
        self.condition: KeyringCondition | None = None
        self._ready: Listeners[None] = Listeners("keyring ready")
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._closed = False
        secrets.on_answer(self._kick.set)

    # -- reads from the cache (never block) ---------------------------------------

    def cached(self, node_id: str, kind: SecretKind) -> str | None:
        return self._cache.get((node_id, kind))

    def is_missing(self, node_id: str, kind: SecretKind) -> bool:
        return (node_id, kind) in self._missing

    def redact(self, node_id: str, text: str) -> str:
        """Take any secret of the node out of text that came from outside (a log)."""
        for kind in SecretKind:
            value = self._cache.get((node_id, kind))
            if value:
                text = text.replace(value, "<redacted>")
        return text

    def on_ready(self, listener: Callable[[], None]) -> None:
        """Hear when secrets that were waited for arrived (or were found missing)."""
        self._ready.add(lambda _: listener())

    # -- calls (bounded; never on the serial queue) ---------------------------------

    async def load(self, node_id: str, kind: SecretKind) -> str | None:
        """The secret, from memory or the keyring; None when the keyring has none (now: see
        `is_missing` for whether that is confirmed)."""
        key = (node_id, kind)
        if key in self._cache:
            return self._cache[key]
        try:
            value = await self.secrets.get(node_id, kind)
        except SecretsError as exc:
            self._refused(exc)
            raise
        self._worked()
        if key in self._cache:  # stored while the read was on its way: the store is newer
            return self._cache[key]
        if value is None:
            self._empty(key)
        else:
            self._cache[key] = value
            self._missing.discard(key)
            self._empty_since.pop(key, None)
        return value

    def _empty(self, key: tuple[str, SecretKind]) -> None:
        """An empty answer: missing once a second one, CONFIRM_S after the first, agrees."""
        now = self._monotonic()
        first = self._empty_since.setdefault(key, now)
        if now - first >= CONFIRM_S:
            self._missing.add(key)
            self._empty_since.pop(key, None)

    async def store(self, node_id: str, kind: SecretKind, value: str) -> None:
        try:
            await self.secrets.set(node_id, kind, value)
        except SecretsError as exc:
            self._refused(exc)
            raise
        self._cache[(node_id, kind)] = value
        self._missing.discard((node_id, kind))
        self._empty_since.pop((node_id, kind), None)
        pending = self._pending.get(node_id)
        if pending is not None:  # a delete left from before: this entry is newer, keep it
            pending.discard(kind)
            if not pending:
                del self._pending[node_id]
        self._worked()

    async def forget(self, node_id: str, kinds: tuple[SecretKind, ...] = NODE_KINDS) -> None:
        """Delete the node's keyring entries (memory first, so no start uses them again).

        `kinds`: which entries; a hosted node's by default (a grant or a lent node has its own).
        """
        for kind in SecretKind:
            self._cache.pop((node_id, kind), None)
            self._missing.discard((node_id, kind))
            self._wanted.discard((node_id, kind))
            self._empty_since.pop((node_id, kind), None)
        try:
            await self.secrets.delete_all(node_id, kinds)
        except SecretsError as exc:
            self._refused(exc)
            self._pending.setdefault(node_id, set()).update(kinds)  # finished once the keyring is back
            self._keep_fetching()
            raise
        self._pending.pop(node_id, None)
        self._worked()

    @property
    def pending_deletes(self) -> dict[str, set[SecretKind]]:
        """Keyring entries whose delete failed, still to be deleted (by the gate, by itself)."""
        return {node_id: set(kinds) for node_id, kinds in self._pending.items()}

    def want(self, node_id: str, kind: SecretKind) -> None:
        """Read this secret in the background; `on_ready` listeners hear when it is there."""
        key = (node_id, kind)
        if key in self._cache or key in self._missing or self._closed:
            return
        self._wanted.add(key)
        self._kick.set()
        self._keep_fetching()

    def drop(self, node_id: str) -> None:
        """A node that is gone needs nothing more."""
        for kind in SecretKind:
            self._wanted.discard((node_id, kind))

    async def prefetch(self, wanted: list[tuple[str, SecretKind]]) -> None:
        """Read these secrets now, one by one, each bounded; failures leave them wanted."""
        for node_id, kind in wanted:
            self._wanted.add((node_id, kind))
        await self._fetch_once()
        if self._wanted and not self._closed:
            self._keep_fetching()

    def _keep_fetching(self) -> None:
        """One background fetcher at a time goes on reading the wanted secrets, finishing the
        failed deletes, and probing a keyring that failed until it works again."""
        if self._closed:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._fetch_wanted(), name="keyring-gate")

    def _has_work(self) -> bool:
        return bool(self._wanted or self._pending or self.condition is not None)

    async def close(self) -> None:
        self._closed = True
        self._kick.set()  # a fetcher between rounds sees _closed and ends, cancelled or not
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- inside ---------------------------------------------------------------------

    def _refused(self, exc: SecretsError) -> None:
        if self.condition is None or self.condition.code != exc.code:
            log.warning("the keyring cannot be used: %s", exc.message)
        self.condition = KeyringCondition(exc.code, exc.message)
        self._keep_fetching()  # try again by itself until it works

    def _worked(self) -> None:
        if self.condition is not None:
            log.info("the keyring works again")
            self.condition = None
            self._kick.set()

    async def _fetch_once(self) -> bool:
        """One round: the failed deletes, then the wanted secrets (or, with neither, a probe);
        True when a secret arrived or was found missing."""
        if not await self._finish_deletes():
            return False
        progressed = False
        for key in sorted(self._wanted):
            if self._closed:
                break
            try:
                value = await self.load(*key)
            except SecretsError:
                break  # the keyring refuses: the rest would too
            if value is None and key not in self._missing:
                continue  # one empty answer: read again after the pause before believing it
            self._wanted.discard(key)
            progressed = True
        if not self._wanted and self.condition is not None:
            await self._probe()
        if progressed:
            self._ready.tell(None)
        return progressed

    async def _finish_deletes(self) -> bool:
        """Delete what a failed `forget` left; False while the keyring still refuses."""
        for node_id, kinds in sorted(self._pending.items()):
            if self._closed:
                return False
            try:
                await self.secrets.delete_all(node_id, tuple(sorted(kinds)))
            except SecretsError as exc:
                self._refused(exc)
                return False
            self._pending.pop(node_id, None)
            log.info("keyring entries of %s deleted, now that the keyring works again", node_id)
            self._worked()
        return True

    async def _probe(self) -> None:
        """Does the keyring answer again? A read of an entry nobody has."""
        try:
            await self.secrets.get(PROBE_ID, SecretKind.CLAIM)
        except SecretsError as exc:
            self._refused(exc)
            return
        self._worked()

    async def _fetch_wanted(self) -> None:
        delay = RETRY_FIRST_S
        while self._has_work() and not self._closed:
            self._kick.clear()
            if self.secrets.hung:
                await self._kick.wait()  # the hung call's return sets it
                continue
            await self._fetch_once()
            if not self._has_work() or self._closed:
                return
            # Refused: wait, or go at once when the keyring answers elsewhere.
            sleeper = asyncio.ensure_future(self._sleep(delay))
            kicked = asyncio.ensure_future(self._kick.wait())
            try:
                await asyncio.wait({sleeper, kicked}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                kicked.cancel()
            delay = RETRY_FIRST_S if self.condition is None else min(delay * 2, RETRY_MAX_S)
