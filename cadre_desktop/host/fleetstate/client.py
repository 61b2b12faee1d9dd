"""The fleet's etcd client: `aetcd` with every call bounded and its failures our errors.

`aetcd` is a maintained asyncio client of etcd's v3 API (gRPC). Three things it does not do
are done here: TLS with the computer's own key (`_TlsClient` opens a secure channel where
aetcd opens a plain one; the key stays in memory); several members behind one channel (a
gRPC `ipv4:` target listing each member; gRPC's default `pick_first` keeps one member's
connection and moves to the next listed when it breaks, keep-alive pings drop a frozen
member's; `round_robin` left a closed channel's connection alive, retrying, after a lease
renewal's stream); and a deadline on every call: gRPC's own per-call deadline plus
`asyncio.timeout` around the whole call (the connection included), so no call outlives
`timeout_s`; a call that times out sends the next ones through a new channel that tries the
next member first (`_next_member`). Whatever goes wrong (a timeout, a member gone, no leader, a refusal) is a
`StoreUnavailable` naming the call, its words made one safe line.

Reads are linearizable (they need a majority of the members): a read that succeeds proves
the store has a majority now, which the take-over decision relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from cadre_desktop.host.fleetstate.endpoints import Endpoint, channel_options, channel_target
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.tls import FleetTls
from cadre_desktop.text import one_line

__all__ = ["CALL_TIMEOUT_S", "Endpoint", "FleetClient", "MemberInfo", "channel_options", "channel_target"]

T = TypeVar("T")

#: The default bound on one call: a healthy store on a home network answers in milliseconds.
CALL_TIMEOUT_S = 3.0
@dataclass(frozen=True)
class MemberInfo:
    """A member of the cluster as etcd lists it (its name is empty until it has started)."""

    id: int
    name: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    #: Added to follow the log without a vote until promoted (`FleetClient.promote`).
    learner: bool = False


class FleetClient:
    """The store's calls the fleet needs, each bounded by `timeout_s`."""

    def __init__(self, endpoints: Sequence[Endpoint], tls: FleetTls | None, *,
                 timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.endpoints = tuple(endpoints)
        self.timeout_s = timeout_s
        # gRPC and aetcd load here, with the first client: a host in no fleet never loads them.
        from cadre_desktop.host.fleetstate.grpc_client import ERRORS, TlsClient, describe

        self._errors, self._describe, self._make = ERRORS, describe, TlsClient
        self._tls = tls
        self._client = TlsClient(self.endpoints, tls, timeout_s)
        self._closing: dict[asyncio.Task[None], Any] = {}  # a close aside -> the channel's client it closes
        #: Set when the calls move to a new channel (`_next_member`), then replaced: a long-lived
        #: stream on the old channel (`watch_deletions`) is opened again on the new one.
        self.moved = asyncio.Event()
        #: The comparisons and operations of a transaction (aetcd's builders).
        self.ops = self._client.transactions

    async def _bounded(self, what: str, call: Awaitable[T], timeout_s: float | None = None) -> T:
        bound = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        try:
            async with asyncio.timeout(bound):
                return await call
        except TimeoutError:
            self._next_member()
            raise StoreUnavailable(f"the fleet's store did not answer {what} within {bound:g} s") from None
        except self._errors as err:
            words = one_line(self._describe(err), 160)
            raise StoreUnavailable(f"the fleet's store refused {what}: {words}") from None

    def _next_member(self) -> None:
        """A call timed out: the next call goes through a new channel that tries the next member
        first. gRPC keeps a connection to a frozen or cut-off member until its keep-alive gives
        up (seconds more than a short lease), every call on it timing out meanwhile. The old
        channel is closed aside once every call begun on it has ended (each is bounded by
        `timeout_s`): a call on a channel closed under it ends in `CancelledError`, which would
        end its caller's task as if cancelled."""
        if len(self.endpoints) < 2:
            return
        old = self._client
        self.endpoints = (*self.endpoints[1:], self.endpoints[0])
        self._client = self._make(self.endpoints, self._tls, self.timeout_s)
        moved, self.moved = self.moved, asyncio.Event()
        moved.set()

        async def close_aside() -> None:
            await asyncio.sleep(2 * self.timeout_s)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.timeout_s):
                    await old.close()
        task = asyncio.get_running_loop().create_task(close_aside())
        self._closing[task] = old
        task.add_done_callback(lambda done: self._closing.pop(done, None))

    async def close(self) -> None:
        for task, old in list(self._closing.items()):  # the channels set aside: nothing uses them now
            task.cancel()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.timeout_s):
                    await old.close()
        self._closing.clear()
        await self._bounded("a close", self._client.close())

    async def get(self, key: bytes) -> bytes | None:
        found = await self._bounded("a read", self._client.get(key))
        return None if found is None else cast(bytes, found.value)

    async def get_prefix(self, prefix: bytes) -> dict[bytes, bytes]:
        """Every key under `prefix` at one revision."""
        found = await self._bounded("a read", self._client.get_prefix(prefix))
        return {cast(bytes, kv.key): cast(bytes, kv.value) for kv in found}

    async def put(self, key: bytes, value: bytes, lease_id: int | None = None) -> None:
        await self._bounded("a write", self._client.put(key, value, lease=lease_id))

    async def delete(self, key: bytes) -> None:
        await self._bounded("a delete", self._client.delete(key))

    async def transaction(self, compare: Sequence[Any], success: Sequence[Any],
                          failure: Sequence[Any] = ()) -> tuple[bool, list[Any]]:
        """One etcd transaction: `success` if every comparison holds, else `failure`; atomic."""
        done = await self._bounded("a transaction", self._client.transaction(
            compare=list(compare), success=list(success), failure=list(failure)))
        return bool(done[0]), list(done[1])

    async def grant(self, ttl_s: int) -> int:
        lease = await self._bounded("a lease grant", self._client.lease(ttl_s))
        return int(lease.id)

    async def refresh(self, lease_id: int, timeout_s: float | None = None) -> int:
        """Renew a lease: its time to live in seconds, 0 when etcd no longer has it (expired).
        `timeout_s` bounds it tighter than the client's calls (a lease shorter than their bound)."""
        reply = await self._bounded("a lease renewal", self._client.renew_once(lease_id), timeout_s)
        return max(int(reply.TTL), 0) if reply is not None else 0

    async def revoke(self, lease_id: int) -> None:
        await self._bounded("a lease revoke", self._client.revoke_lease(lease_id))

    async def watch_deletions(self, prefix: bytes, deleted: Callable[[list[bytes]], None]) -> None:
        """Call `deleted` with the keys under `prefix` each time some are deleted, until cancelled;
        first with none, once the store has made the watch (what was deleted before is not told).
        The watch is on the channel of the moment: when the calls move to another (`moved`), or it
        fails, it ends (`StoreUnavailable`) and its caller opens it again. Unbounded on purpose, a
        stream that is quiet most of the time; a stream whose channel closed under it (gRPC ends it
        in `CancelledError`) is a failure like any other, not this task's cancel."""
        stream = self._client.deletions(prefix, prefix[:-1] + bytes([prefix[-1] + 1]))
        try:
            async for keys in stream:
                deleted(keys)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise StoreUnavailable("the fleet's store ended a watch: its channel closed") from None
        except self._errors as err:
            words = one_line(self._describe(err), 160)
            raise StoreUnavailable(f"the fleet's store refused a watch: {words}") from None
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
        raise StoreUnavailable("the fleet's store ended a watch")

    async def move_leader(self, member_id: int) -> None:
        """Hand the cluster's leadership to `member_id`; asked of the leader (a one-member client)."""
        await self._bounded("a leader move", self._client.move_leader(member_id))

    async def status(self) -> tuple[int, int]:
        """(the answering member's id, the id of the leader it follows, 0: none)."""
        reply = await self._bounded("a status", self._client.own_status())
        return int(reply.header.member_id), int(reply.leader)

    async def members(self) -> list[MemberInfo]:
        async def listed() -> list[MemberInfo]:
            return [_member(m) for m in await self._client.member_list()]
        return await self._bounded("the member list", listed())

    async def add_member(self, peer_urls: Sequence[str]) -> MemberInfo:
        """A member added as a learner (no vote until `promote`)."""
        return _member(await self._bounded("a member add", self._client.add_learner(list(peer_urls))))

    async def promote(self, member_id: int) -> None:
        await self._bounded("a member promotion", self._client.promote(member_id))

    async def is_learner(self) -> bool:
        """Whether the member answering is a learner (the one member of a one-endpoint client)."""
        return bool((await self._bounded("a status", self._client.own_status())).isLearner)

    async def remove_member(self, member_id: int) -> None:
        await self._bounded("a member remove", self._client.remove_member(member_id))

    async def leader(self) -> int:
        """The id of the member the answering member follows (0: none)."""
        return int((await self._bounded("a status", self._client.own_status())).leader)


def _member(m: Any) -> MemberInfo:
    """etcd's `Member` message as ours."""
    return MemberInfo(int(m.ID), str(m.name), tuple(str(u) for u in m.peerURLs), tuple(str(u) for u in m.clientURLs),
                      bool(m.isLearner))
