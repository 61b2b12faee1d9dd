"""A real etcd cluster of 1..3 members on 127.0.0.1 for the fleet-state tests, TLS on.

Each member is one "computer": its own P-256 key, its own self-signed certificate, every
member trusting all of them (as pinned computers will), its data folder in the test's tmp
folder, ports from the suite's port blocks. Quick Raft timings (heartbeat 50 ms, election
500 ms) keep a failover of the leader under a second or two on a busy machine.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from cadre_desktop.host.fleetstate.client import FleetClient
from cadre_desktop.host.fleetstate.member import EtcdMember, MemberSpec, Peer, etcd_command
from cadre_desktop.host.fleetstate.tls import FleetTls, anchor_for, certificate_for
from cadre_desktop.host.local.system.seam import for_this_os
from tests.support import port_blocks


@dataclass
class Cluster:
    members: list[EtcdMember]
    tls: list[FleetTls]
    clients: list[FleetClient] = field(default_factory=list)

    def client(self, index: int | None = None, timeout_s: float = 2.0) -> FleetClient:
        """A client of every member (or of one), as computer `index` (default the first)."""
        chosen = self.members if index is None else [self.members[index]]
        tls = self.tls[index or 0]
        client = FleetClient([m.spec.endpoint for m in chosen], tls, timeout_s=timeout_s)
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                await client.close()
        await asyncio.gather(*(member.stop(grace_s=1.0) for member in self.members))


def computers(count: int) -> tuple[list[str], list[ec.EllipticCurvePrivateKey], list[bytes], list[bytes]]:
    """Names, keys, the certificates pairing would pin (anchors) and the members' certificates."""
    names = [f"computer-{chr(ord('a') + i)}" for i in range(count)]
    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in names]
    anchors = [anchor_for(key, name) for key, name in zip(keys, names, strict=True)]
    certs = [certificate_for(key, name) for key, name in zip(keys, names, strict=True)]
    return names, keys, anchors, certs


def make_cluster(root: Path, count: int = 3) -> Cluster:
    """The members of a new cluster (not started: `start_cluster`)."""
    names, keys, anchors, certs = computers(count)
    base = port_blocks.take(2 * count, 20000, 30000)
    system, command = for_this_os(), etcd_command()
    members, tls = [], []
    for i, name in enumerate(names):
        spec = MemberSpec(name=name, host="127.0.0.1", client_port=base + 2 * i, peer_port=base + 2 * i + 1,
                          root=root / name / "etcd", heartbeat_ms=50, election_ms=500)
        own = FleetTls.of(keys[i], certs[i], anchors)
        tls.append(own)
        members.append(EtcdMember(spec, system, command, own))
    return Cluster(members, tls)


async def start_cluster(cluster: Cluster, within_s: float = 30.0) -> None:
    initial = [Peer(m.spec.name, m.spec.peer_url(True)) for m in cluster.members]
    for member in cluster.members:
        await member.start(initial)
    await asyncio.gather(*(member.wait_ready(within_s) for member in cluster.members))
