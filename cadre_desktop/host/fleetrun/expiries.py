"""The computers' leases as they end: a watch that wakes failover's pass at once.

A take is due when a holder's lease expires, and a pass every third of a lease would find it up
to that much later. etcd deletes a lease's keys the moment it expires (or is revoked), so one
quiet watch stream on the lease keys (`computers/<computer>/lease`, deletions only) tells each
computer when another's lease has gone, and its pass runs then. The watch is on the store's
client of the moment: opened again when the client or its channel changes (a call that timed out
moved the calls to another member) or the stream fails, after `AGAIN_S`; each time it is made
the pass runs too, so a lease that went while no watch was open is seen then, not a period later.
The passes go on without it either way: it only makes them sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from cadre_desktop.errors import CadreError
from cadre_desktop.host.fleetrun.store import READ_S, FleetStore
from cadre_desktop.host.fleetstate.shared import COMPUTERS, lease_owner

log = logging.getLogger(__name__)

#: How long a watch that failed (or a store not ready) waits before it is opened again.
AGAIN_S = 1.0


class Expiries:
    def __init__(self, store: FleetStore, *, me: Callable[[], str], name_of: Callable[[str], str],
                 wake: Callable[[], None]) -> None:
        self._store, self._me, self._name_of, self._wake = store, me, name_of, wake

    async def run(self) -> None:
        """Until cancelled: the watch kept open on the store's current client."""
        while True:
            client = self._store.client
            if client is None or self._store.state != "ready":
                await asyncio.sleep(AGAIN_S)
                continue
            reader = asyncio.create_task(client.watch_deletions(COMPUTERS, self.deleted))
            moved = asyncio.create_task(client.moved.wait())
            try:
                while not reader.done() and not moved.done() and self._store.client is client:
                    await asyncio.wait({reader, moved}, timeout=READ_S)
            finally:
                for task in (reader, moved):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, CadreError):
                        await task
            if reader.done() and not reader.cancelled() and (failed := reader.exception()) is not None:
                log.info("failover: the lease watch ended (%s); it is opened again", getattr(failed, "message", failed))
                await asyncio.sleep(AGAIN_S)

    def deleted(self, keys: list[bytes]) -> None:
        """Keys gone (none: the watch was just made). Another computer's lease key: a pass now."""
        gone = [owner for key in keys if (owner := lease_owner(key)) not in (None, self._me())]
        if gone:
            log.info("failover: the lease of %s is gone; a pass now", ", ".join(map(self._name_of, gone)))
        if not keys or gone:
            self._wake()
