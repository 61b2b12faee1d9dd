"""A computer's lease on the fleet's store, kept alive by one task, and its safe deadline.

etcd expires a lease on its leader's clock, `ttl` after the last renewal it received; a
renewal is received after it was sent, so until `sent + ttl` (on any clock that runs at the
same rate) no other computer can have seen the lease expire. `LeaseKeeper.deadline_ns` is
that instant on this computer's boot clock (`wire/lease.py`: it counts a suspend), less a
safety margin for clocks that do not run at quite the same rate: the deadline a failover
node is started with and moved on to, and the one its host must stop it by when renewals
fail. A renewal that finds the lease gone (`TTL 0`: it expired, the computer was frozen or
cut off) makes the keeper `lost` for good; the host then needs a new lease, and everything
it held under the old one has been taken or may be.

The task renews every third of the time to live; a renewal that fails is tried again sooner,
never more often than `RETRY_S`. Each renewal is bounded by a fifth of the time to live (at
most the client's bound): a renewal stuck on a frozen or cut-off member must fail, and the client
move to the next member, while the lease still has time, not after it. `stop` ends the task and
revokes the lease (bounded; a store that does not answer lets it expire on its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from pathlib import Path

from cadre_desktop.files.atomicfile import write_bytes_atomic
from cadre_desktop.host.fleetstate.client import FleetClient
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.wire import lease as wire_lease
from cadre_desktop.wire.lease import LeaseTerms, boot_ns

log = logging.getLogger(__name__)

#: The shortest wait between two tries after a failed renewal.
RETRY_S = 0.25


def safety_ns(ttl_ms: int) -> int:
    """The margin kept off a lease's end: a tenth of it, at least half a second, at most 3 s."""
    return int(min(max(ttl_ms / 10, 500), 3000) * 1_000_000)


def node_terms(generation: int, keeper: LeaseKeeper) -> LeaseTerms:
    """What a failover node at `generation` is started with, or moved on to: the keeper's deadline."""
    return LeaseTerms(generation, keeper.deadline_ns)


def extend_node(node_dir: Path, terms: LeaseTerms) -> None:
    """Move a running failover node's deadline (node contract: `lease.json`, written whole and
    atomically, 0600). Blocking (an fsync): call it on a thread, or the host's writer."""
    write_bytes_atomic(node_dir / wire_lease.LEASE_FILE, wire_lease.render(terms))


class LeaseKeeper:
    """Grant one lease and keep it alive until `stop`, or until the store says it is gone."""

    def __init__(self, client: FleetClient, ttl_ms: int, *, now_ns: Callable[[], int] = boot_ns,
                 on_lost: Callable[[], None] | None = None) -> None:
        self.client = client
        self.ttl_ms = ttl_ms
        self.ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self._now_ns = now_ns
        self._on_lost = on_lost
        self.lease_id: int | None = None
        #: When the last renewal that the store acknowledged was sent (boot clock, ns).
        self.renewed_ns: int | None = None
        self.lost = False
        self.renewals = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def deadline_ns(self) -> int:
        """Until when this computer may be sure it holds its lease (boot clock); 0 when it may not."""
        if self.renewed_ns is None or self.lost:
            return 0
        return self.renewed_ns + self.ttl_s * 1_000_000_000 - safety_ns(self.ttl_s * 1000)

    def valid(self) -> bool:
        return self._now_ns() < self.deadline_ns

    async def start(self) -> int:
        """Grant the lease and start renewing it; its id."""
        sent = self._now_ns()
        self.lease_id = await self.client.grant(self.ttl_s)
        self.renewed_ns = sent
        self._task = asyncio.create_task(self._keep(), name=f"lease-{self.lease_id:x}")
        return self.lease_id

    async def renew(self) -> bool:
        """One renewal; False when the store no longer has the lease (then `lost`)."""
        assert self.lease_id is not None, "start() first"
        sent = self._now_ns()
        ttl = await self.client.refresh(self.lease_id, timeout_s=max(0.5, self.ttl_s / 5))
        if ttl <= 0:
            self._lose()
            return False
        self.renewed_ns = sent
        self.renewals += 1
        return True

    def _lose(self) -> None:
        if not self.lost:
            self.lost = True
            log.warning("the fleet lease %x expired: this computer's hold on its failover nodes is gone",
                        self.lease_id or 0)
            if self._on_lost is not None:
                self._on_lost()

    async def _keep(self) -> None:
        period = self.ttl_s / 3
        wait = period
        while not self.lost:
            await asyncio.sleep(wait)
            try:
                await self.renew()
                wait = period
            except StoreUnavailable as err:
                wait = max(RETRY_S, min(period, wait / 2))
                log.info("a renewal of the fleet lease failed (%s); trying again in %.2f s", err.message, wait)

    async def stop(self, *, revoke: bool = True) -> None:
        """End the renewals; revoke the lease (bounded) unless told not to."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if revoke and self.lease_id is not None and not self.lost:
            try:
                await self.client.revoke(self.lease_id)
            except StoreUnavailable as err:
                log.info("the fleet lease was not revoked (%s): it expires on its own", err.message)
        self.renewed_ns = None
