"""The node's behaviour, free of HTTP: status, claim, owners, and its state machine.

States (``NodeState`` on the wire is the ``state`` field of ``/status``)::

    unclaimed --claim--> joined                     (started with CADRE_CLAIM_SECRET)
    joining --invitation redeemed--> joined         (started with CADRE_INVITATION)
    joining --invitation refused or unreachable--> failed
    awaiting_seed --seed from a pinned owner key--> seeded   (started with CADRE_DONATION_ID)

``joined`` and ``seeded`` are persisted (the membership in the state file), so a respawned node
starts joined. ``joining`` and ``failed`` are not: a respawned node that was not yet
joined tries its invitation again. Each transition is made in one named method and
logged.

The HTTP layer (:mod:`api`) only parses requests and renders answers; every
decision is here, so it can be tested without sockets.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Callable
from typing import Any

from cadre_desktop.node.cadre.donated import seeded_record
from cadre_desktop.node.clock import Clock, iso_utc
from cadre_desktop.node.config import NodeConfig
from cadre_desktop.node.identity import Identity
from cadre_desktop.node.state import Member, Membership, NodeState, StateStore
from cadre_desktop.wire.ratelimit import FailureLimiter
from cadre_desktop.wire.refusal import RequestRefused

log = logging.getLogger("cadre.node")

MAX_OWNER_TOKENS = 8  # each claim by the owner adds one; the oldest are dropped
#: Requests waiting at once for the state to change (`GET /status?wait=`); more are answered at once.
MAX_WAITERS = 4


class Phase(str, enum.Enum):
    UNCLAIMED = "unclaimed"
    JOINING = "joining"
    JOINED = "joined"
    FAILED = "failed"
    AWAITING_SEED = "awaiting_seed"
    SEEDED = "seeded"


def sha256_hex(text: str) -> str:
    # surrogatepass: a header's undecodable bytes (aiohttp keeps them as surrogates) are
    # an unknown token, never an error.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def same_cadre(a: str, b: str) -> bool:
    """Cadre names match ignoring case: a phone keyboard capitalises on its own."""
    return a.casefold() == b.casefold()


def _is_loopback(remote: str | None) -> bool:
    try:
        return ipaddress.ip_address((remote or "").split("%")[0]).is_loopback
    except ValueError:
        return False


class Node:
    def __init__(
        self,
        config: NodeConfig,
        identity: Identity,
        store: StateStore,
        clock: Clock,
        version: str,
    ) -> None:
        self.config = config
        self.identity = identity
        self.peer_id = identity.peer_id
        self.store = store
        self.clock = clock
        self.version = version
        tuning = config.tuning
        self.claim_limiter = FailureLimiter(
            clock, max_failures=tuning.claim_max_failures, lockout_s=tuning.claim_lockout_s
        )
        self.join_limiter = FailureLimiter(
            clock, max_failures=tuning.claim_max_failures, lockout_s=tuning.claim_lockout_s
        )
        self.seed_limiter = FailureLimiter(
            clock, max_failures=tuning.claim_max_failures, lockout_s=tuning.claim_lockout_s
        )
        self._join_failure: str | None = None
        #: Set when the state changes or the node stops, then replaced: what `wait_for_change` waits on.
        self._moved: asyncio.Event | None = None
        self._waiters = 0
        #: Set when the node stops: a request that would wait answers at once.
        self.stopping = False
        #: Set by the server when the node stopped because its lease ran out (node/lease.py).
        self.lease_expired = False
        #: Set by the server: ends the node as a stop signal does.
        self.on_stop: Callable[[], None] | None = None
        if config.donated is not None and store.state.seed is not None and not seeded_record(config.donated, store.state.seed):
            log.warning("the state file holds a seed for another donation or party; it is ignored")
        if store.state.node_id != config.node_id:
            log.warning(
                "the state file was written for node %r; this is node %r",
                store.state.node_id,
                config.node_id,
            )

    # ----- reading -------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        if self.config.donated is not None:
            return Phase.SEEDED if seeded_record(self.config.donated, self.store.state.seed) else Phase.AWAITING_SEED
        if self.store.state.membership is not None:
            return Phase.JOINED
        if self.config.invitation is not None:
            return Phase.FAILED if self._join_failure else Phase.JOINING
        return Phase.UNCLAIMED

    @property
    def cadre(self) -> str | None:
        membership = self.store.state.membership
        return membership.cadre if membership else None

    def status(self) -> dict[str, Any]:
        """The body of ``GET /status``: the contract's seven fields, and a donated node's three."""
        phase = self.phase
        status: dict[str, Any] = {
            "node_id": self.config.node_id,
            "peer_id": self.peer_id,
            "state": phase.value,
            "cadre": self.cadre,
            "error": self._join_failure if phase is Phase.FAILED else None,
            "version": self.version,
            "generation": self.config.lease.generation if self.config.lease else None,
        }
        donated = self.config.donated
        if donated is not None:
            status["donation_id"] = donated.donation_id
            status["party"] = donated.party_id if phase is Phase.SEEDED else None
            status["profile"] = donated.profile
        return status

    async def wait_for_change(self, since: str, wait_s: float) -> None:
        """Return once the state is no longer `since`, the node stops, or `wait_s` has passed.

        At once when it already differs, or when `MAX_WAITERS` requests already wait: a
        waiting request holds its connection busy, and anyone on the network may ask.
        """
        if self.phase.value != since or self._waiters >= MAX_WAITERS or self.stopping:
            return
        if self._moved is None:
            self._moved = asyncio.Event()
        moved = self._moved
        self._waiters += 1
        try:
            async with asyncio.timeout(wait_s):
                await moved.wait()
        except TimeoutError:
            pass
        finally:
            self._waiters -= 1

    def release_waiters(self) -> None:
        """Every request waiting for a change answers now (a change, or the node stopping)."""
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set()

    # ----- claim ---------------------------------------------------------------

    def claim(self, client: str, secret: str, cadre: str) -> dict[str, str]:
        """Claim this node into ``cadre`` for whoever knows the claim secret.

        Order matters: a throttled client learns nothing, not even whether its secret
        was right; a wrong secret is refused before the cadre is looked at, so only a
        holder of the secret learns which cadre owns the node.
        """
        self.check_throttle(self.claim_limiter, client)
        membership = self.store.state.membership
        if self.config.claim_secret is None:
            if membership is not None:
                raise _already_claimed(membership.cadre)
            if self.config.donated is not None:
                raise RequestRefused(
                    "this node is lent to another party; it cannot be claimed", code="not_claimable"
                )
            raise RequestRefused(
                "this node joins its cadre by invitation; it cannot be claimed", code="not_claimable"
            )
        if not hmac.compare_digest(secret.encode(), self.config.claim_secret.encode()):
            self.claim_limiter.failed(client)
            raise RequestRefused("the claim code is wrong or has expired", code="wrong_secret")
        self.claim_limiter.succeeded(client)
        if membership is not None and not same_cadre(membership.cadre, cadre):
            raise _already_claimed(membership.cadre)

        token = secrets.token_urlsafe(32)
        now = self.clock.wall()

        def change(state: NodeState) -> str:
            if state.membership is None:
                state.membership = Membership(cadre=cadre, via="claim", joined_at=now)
                state.members = [Member(peer_id=self.peer_id, joined_at=now, via="claim")]
            state.owner_token_sha256.append(sha256_hex(token))
            del state.owner_token_sha256[:-MAX_OWNER_TOKENS]
            return state.membership.cadre

        first = membership is None
        held = self.store.update(change)
        if first:
            self._transition(Phase.UNCLAIMED, Phase.JOINED, f"claimed into cadre {held!r}")
        else:
            log.info("claimed again by the owner of cadre %r; a new owner token issued", held)
        return {"cadre": held, "owner_token": token, "peer_id": self.peer_id}

    def authorize_owner(self, token: str | None, remote: str | None = None) -> None:
        """Accept only a bearer of an owner token this node issued (and still keeps), or
        the host's own token (`CADRE_HOST_TOKEN`) on a connection from this machine."""
        if not token:
            raise RequestRefused(
                "send the owner token as 'Authorization: Bearer <token>'", code="unauthorized"
            )
        digest = sha256_hex(token)
        # Compare against every stored hash, without stopping early.
        matched = False
        for stored in self.store.state.owner_token_sha256:
            matched |= hmac.compare_digest(digest, stored)
        host_token = self.config.host_token
        if host_token is not None:
            # From the LAN it is just an unknown token: the host never sends it there.
            matched |= hmac.compare_digest(digest, sha256_hex(host_token)) and _is_loopback(remote)
        if not matched:
            raise RequestRefused("this owner token is not valid for this node", code="forbidden")

    def authorize_host(self, token: str | None, remote: str | None = None) -> None:
        """Accept only the host's own token (`CADRE_HOST_TOKEN`) on a connection from this machine."""
        if not token:
            raise RequestRefused("send the host token as 'Authorization: Bearer <token>'", code="unauthorized")
        host_token = self.config.host_token
        if host_token is None or not (hmac.compare_digest(sha256_hex(token), sha256_hex(host_token))
                                      and _is_loopback(remote)):
            raise RequestRefused("only the host that runs this node may ask this", code="forbidden")

    def stop_soon(self) -> None:
        """End the node as SIGTERM does (exit code 0), once the answer in flight is sent."""
        if self.on_stop is not None:
            self.on_stop()

    # ----- joiner side of an invitation ---------------------------------------

    def join_succeeded(self, cadre: str, inviter: str) -> None:
        """Persist the membership an invitation gave us."""
        now = self.clock.wall()

        def change(state: NodeState) -> None:
            state.membership = Membership(
                cadre=cadre, via="invitation", joined_at=now, inviter=inviter
            )

        self.store.update(change)
        self._join_failure = None
        self._transition(Phase.JOINING, Phase.JOINED, f"joined cadre {cadre!r} by invitation")

    def join_failed(self, reason: str) -> None:
        """Report the reason through /status and keep serving so it can be read."""
        self._join_failure = reason
        self._transition(Phase.JOINING, Phase.FAILED, reason)

    # ----- helpers ---------------------------------------------------------------

    def check_throttle(self, limiter: FailureLimiter, client: str) -> None:
        wait = limiter.retry_after(client)
        if wait is not None:
            raise RequestRefused(
                f"too many wrong codes from this device; try again in {wait} s",
                code="too_many_tries",
                retry_after_s=wait,
            )

    def _transition(self, old: Phase, new: Phase, why: str) -> None:
        self.note_transition(old.value, new.value, why)

    def note_transition(self, old: str, new: str, why: str) -> None:
        log.info("state %s -> %s: %s", old, new, why)
        self.release_waiters()

    def iso(self, epoch_s: float) -> str:
        return iso_utc(epoch_s)


def _already_claimed(cadre: str) -> RequestRefused:
    return RequestRefused(
        f"this node is already claimed by the cadre {cadre!r}", code="already_claimed"
    )
