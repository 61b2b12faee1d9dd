"""This computer's lease on the fleet's store, and which failover nodes it may run under it.

Never twice rests on one rule, kept here and nowhere else: a failover node runs on this
computer with a deadline in the future only while a read of the store **made under this
computer's current lease** found the node held here at that generation. "Under the lease":
the read began after the lease key (`SharedState.announce`) was written, and the lease has
not run out since. The argument, with the take's transaction (`SharedState.take` compares
that the holder has no lease key):

- from the announce until the lease expires in the store, no take of a node held here can
  succeed (the holder's lease key is there);
- a take that succeeded before the announce is seen by the read (it began after), which then
  finds another holder: the node is not confirmed, and runs here on no future deadline;
- a node's deadline is the lease's own (`LeaseKeeper.deadline_ns`), which ends before the
  store can have expired the lease anywhere.

So a copy here at generation g and a copy elsewhere at g+1 never both have a deadline ahead.
A new lease (the last one was lost: the computer slept, was frozen or cut off) confirms
nothing until the next read under it; every start meanwhile gets a deadline already past
(`node_terms_past`), and the supervisor does not start the node at all (`start_wait`). Before
the store has been read at all (a host restarted after a crash), a node that ran here under
a lease starts under its last `lease.json`'s terms: that deadline was one of this computer's
leases, so it is as safe as it was (on the boot clock, which a restart does not reset).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from cadre_desktop.errors import Invalid
from cadre_desktop.host.fleetstate.client import FleetClient
from cadre_desktop.host.fleetstate.leases import LeaseKeeper, node_terms
from cadre_desktop.host.fleetstate.shared import NodeShared, SharedState
from cadre_desktop.wire.lease import LEASE_FILE, LeaseTerms, boot_ns, env_of
from cadre_desktop.wire.lease import read as read_lease

log = logging.getLogger(__name__)

#: Why a failover node is not started here now (the supervisor's `WAIT_LEASE`, in its view).
NO_LEASE = "waiting for this computer's lease on the fleet's store (another computer may hold the node now)"


def node_terms_past(generation: int) -> LeaseTerms:
    """Terms whose deadline has passed: a failover node started without a valid lease stops at once."""
    return LeaseTerms(generation, 1)


class LeaseHold:
    """The keeper of this computer's lease, whether the store has its key, and the nodes confirmed under it."""

    def __init__(self, *, ttl_ms: Callable[[], int], me: Callable[[], str], node_dir: Callable[[str], Path],
                 nodes: Callable[[], Mapping[str, NodeShared]], now_ns: Callable[[], int] = boot_ns,
                 booted_at: Callable[[], float] = psutil.boot_time) -> None:
        self._ttl_ms, self._me, self._node_dir, self._nodes, self._now_ns = ttl_ms, me, node_dir, nodes, now_ns
        #: When this boot began (wall clock): a lease file older than it holds another boot's clock.
        self._booted_at = booted_at
        self.keeper: LeaseKeeper | None = None
        #: The lease whose key the store has (the announce succeeded); None until then.
        self.announced: int | None = None
        #: Per node held here: (generation, the lease a read found it under, when that read began).
        self._confirmed: dict[str, tuple[int, int, int]] = {}
        self._reads = 0
        #: A read of every node has been made (a node it did not find is outside failover), and the
        #: nodes whose keys it could not read (treated as held elsewhere: never started with a future deadline).
        self.read_once = False
        self._unreadable: frozenset[str] = frozenset()

    # -- the lease -------------------------------------------------------------------

    def under(self) -> int | None:
        """The lease a read that begins now is made under (announced, not lost, not past), else None."""
        keeper = self.keeper
        if keeper is None or keeper.lost or keeper.lease_id is None or self.announced != keeper.lease_id:
            return None
        return keeper.lease_id if self._now_ns() < keeper.deadline_ns else None

    def left_s(self) -> float | None:
        """Seconds until this computer's deadline; None with no lease (or one not announced yet)."""
        keeper = self.keeper
        if self.under() is None or keeper is None:
            return None
        return (keeper.deadline_ns - self._now_ns()) / 1e9

    async def ensure(self, client: FleetClient | None, state: Callable[[], SharedState]) -> None:
        """A lease kept alive on `client`, its key announced; a lost one (or another client's) replaced."""
        keeper = self.keeper
        if keeper is None or keeper.lost or keeper.client is not client:
            if keeper is not None:
                await keeper.stop(revoke=False)
            self.keeper, self.announced = None, None
            if client is None:
                return
            keeper = LeaseKeeper(client, self._ttl_ms(), now_ns=self._now_ns)
            await keeper.start()
            self.keeper = keeper
        if keeper.lease_id is not None and self.announced != keeper.lease_id:
            await state().announce(self._me(), keeper.lease_id, self._ttl_ms())
            self.announced = keeper.lease_id
            log.info("failover: this computer's lease %x (%d ms)", keeper.lease_id, self._ttl_ms())

    async def stop(self, *, revoke: bool) -> None:
        if self.keeper is not None:
            await self.keeper.stop(revoke=revoke)
        self.keeper, self.announced = None, None
        self._confirmed.clear()

    # -- what a read under it found ------------------------------------------------------

    def reading(self) -> int:
        """A read (or a transaction) begins: its number, for `confirm` and `confirm_one`."""
        self._reads += 1
        return self._reads

    def confirm(self, nodes: Mapping[str, NodeShared], lease: int | None, since: int,
                unreadable: frozenset[str] | set[str] = frozenset()) -> None:
        """A read of every node, begun (`reading()` = `since`) under `lease` (`under()` before it was
        sent), found `nodes`. What a later read or take confirmed stays: it saw more than this one."""
        me = self._me()
        later = {node: got for node, got in self._confirmed.items() if got[2] > since}
        found = {} if lease is None else {n.node: (n.generation, lease, since) for n in nodes.values()
                                          if n.failover and n.holder == me and n.generation > 0}
        self._confirmed = {**found, **later}
        self.read_once, self._unreadable = True, frozenset(unreadable)

    def confirm_one(self, node_id: str, generation: int, lease: int | None, since: int) -> None:
        """A read of one node, or this computer's own take, begun at `since` under `lease`, found it held
        here at `generation`."""
        if lease is not None:
            self._confirmed[node_id] = (generation, lease, since)

    def forget(self, node_id: str) -> None:
        self._confirmed.pop(node_id, None)

    def confirmed(self, node_id: str) -> bool:
        """A read (under this lease or one before it) found the node held here, and none since said otherwise."""
        return node_id in self._confirmed

    def held(self, node_id: str) -> int | None:
        """The generation the node runs at here under the current lease, or None (not confirmed under it)."""
        found = self._confirmed.get(node_id)
        lease = self.under()
        return found[0] if found is not None and lease is not None and found[1] == lease else None

    # -- a start's terms ---------------------------------------------------------------

    def live_terms(self, node_id: str) -> LeaseTerms | None:
        """The terms of a node confirmed held here under the current lease (its deadline the lease's), else None.
        What a start gets, and what a running copy's `lease.json` is moved on to."""
        generation, keeper = self.held(node_id), self.keeper
        shared = self._nodes().get(node_id)
        if shared is not None and generation is not None and (shared.generation > generation or not shared.failover):
            return None  # a later read saw the node go on (a move, a take) or failover go off: stale
        return node_terms(generation, keeper) if generation is not None and keeper is not None else None

    def terms(self, node_id: str) -> LeaseTerms | None:
        """The terms a start of the node gets here; None for a node outside failover (started as always)."""
        live = self.live_terms(node_id)
        if live is not None:
            return live
        shared = self._nodes().get(node_id)
        if shared is None:
            if node_id in self._unreadable:
                return node_terms_past(1)
            return None if self.read_once else self._kept_terms(node_id)
        if not shared.failover or shared.generation < 1:
            return None
        return node_terms_past(shared.generation)

    def lease_env(self, node_id: str) -> dict[str, str]:
        """The start's lease variables (`Starter.extra_env`): empty for a node outside failover."""
        terms = self.terms(node_id)
        return env_of(terms) if terms is not None else {}

    def start_wait(self, node_id: str) -> str | None:
        """Why the supervisor must not start the node now (a failover node with no deadline ahead), or None."""
        terms = self.terms(node_id)
        return NO_LEASE if terms is not None and terms.expired(self._now_ns()) else None

    def _kept_terms(self, node_id: str) -> LeaseTerms | None:
        """The terms of the node's `lease.json` here (a tiny file, read as the start is made), or None.
        One written before this boot began is past: its deadline was on the last boot's clock, which
        the new one restarted from zero (it could lie hours ahead)."""
        folder = self._node_dir(node_id)
        try:
            kept = read_lease(folder)
            if kept is not None and (folder / LEASE_FILE).stat().st_mtime < self._booted_at():
                return node_terms_past(kept.generation)
            return kept
        except (OSError, Invalid):
            return node_terms_past(1)  # a damaged lease file: never serve on it
