"""aetcd's client on a channel of ours (TLS from the fleet's keys, several members): imported only
when a fleet store is first asked (`client.FleetClient`), so a host in no fleet loads no gRPC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import aetcd
import grpc
from aetcd import exceptions as aetcd_errors
from aetcd import rpc, watcher

from cadre_desktop.host.fleetstate.endpoints import Endpoint, channel_options, channel_target
from cadre_desktop.host.fleetstate.tls import FleetTls

#: What a call of the store raises when the store refuses it or cannot be reached.
ERRORS: tuple[type[BaseException], ...] = (aetcd_errors.ClientError, grpc.RpcError)


def describe(err: BaseException) -> str:
    """A refusal in words: a gRPC error's status and details (its `str` is a multi-line repr
    with the channel's debug string), else the error's own words."""
    if isinstance(err, grpc.aio.AioRpcError):
        return f"{err.code().name.lower()}: {err.details() or 'no details'}"
    return str(err) or type(err).__name__


class TlsClient(aetcd.Client):  # type: ignore[misc]  # aetcd ships no types
    """aetcd's client on a channel we open: TLS (or plain, for a test's own store), several members."""

    def __init__(self, endpoints: Sequence[Endpoint], tls: FleetTls | None, timeout_s: float) -> None:
        super().__init__(timeout=timeout_s)
        self._target = channel_target(endpoints)
        self._tls = tls

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        options = channel_options(self._tls)
        if self._tls is None:
            self.channel = grpc.aio.insecure_channel(self._target, options=options)
        else:
            creds = grpc.ssl_channel_credentials(root_certificates=self._tls.trusted_pem,
                                                 private_key=self._tls.key_pem, certificate_chain=self._tls.cert_pem)
            self.channel = grpc.aio.secure_channel(self._target, creds, options=options)
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout, metadata=None)
        self._connected.set()

    async def member_list(self) -> list[Any]:
        """etcd's members as it lists them (aetcd's own list leaves out whether one is a learner)."""
        await self.connect()
        reply = await self.clusterstub.MemberList(rpc.MemberListRequest(), timeout=self._timeout)
        return list(reply.members)

    async def add_learner(self, urls: Sequence[str]) -> Any:
        """A member added as a learner: it follows the log but has no vote until promoted, so a
        member added and never started costs the cluster no majority."""
        await self.connect()
        reply = await self.clusterstub.MemberAdd(rpc.MemberAddRequest(peerURLs=list(urls), isLearner=True),
                                                 timeout=self._timeout)
        return reply.member

    async def promote(self, member_id: int) -> None:
        """A learner made a voting member (etcd refuses while it is behind the leader's log)."""
        await self.connect()
        await self.clusterstub.MemberPromote(rpc.MemberPromoteRequest(ID=member_id), timeout=self._timeout)

    async def own_status(self) -> Any:
        """The answering member's status as etcd sends it (aetcd's own looks its leader up in the
        member list, which a learner does not serve; a learner answers its status)."""
        await self.connect()
        return await self.maintenancestub.Status(rpc.StatusRequest(), timeout=self._timeout)

    async def move_leader(self, member_id: int) -> None:
        """Leadership handed to `member_id` (etcd takes this from its leader only)."""
        await self.connect()
        await self.maintenancestub.MoveLeader(rpc.MoveLeaderRequest(targetID=member_id), timeout=self._timeout)

    async def deletions(self, key: bytes, range_end: bytes) -> AsyncGenerator[list[bytes], None]:
        """The keys of `[key, range_end)` as they are deleted (a lease's expiry deletes its keys), a
        list per revision, on one watch stream of the raw API, for as long as it is iterated; first an
        empty list once etcd has made the watch (nothing deleted after it is missed). The stream has no
        deadline of its own: its caller ends it (`aclose`)."""
        await self.connect()
        ended = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                key=key, range_end=range_end, filters=[rpc.WatchCreateRequest.FilterType.NOPUT]))
            await ended.wait()  # the request side stays open: etcd keeps the watch while it is

        call = rpc.WatchStub(self.channel).Watch(requests())
        try:
            async for reply in call:
                if reply.canceled:
                    raise aetcd_errors.ClientError(reply.cancel_reason or "the store cancelled the watch")
                keys = [bytes(event.kv.key) for event in reply.events]
                if keys or reply.created:
                    yield keys
        finally:
            ended.set()
            call.cancel()

    async def renew_once(self, lease_id: int) -> Any:
        """One lease renewal on a stream of its own, ended after its one answer. (aetcd's
        `refresh_lease` leaves the stream open until the call is collected; a channel closed
        meanwhile kept a connection alive, retrying.)"""
        await self.connect()
        call = self.leasestub.LeaseKeepAlive([rpc.LeaseKeepAliveRequest(ID=lease_id)], timeout=self._timeout)
        try:
            async for reply in call:
                return reply
            return None
        finally:
            call.cancel()
