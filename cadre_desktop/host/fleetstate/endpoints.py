"""Where the fleet's store is and how a channel to it is made: its members' addresses, one gRPC
target for all of them, and the channel's options (keep-alive, reconnects, the fleet's TLS name).
Pure data and no gRPC: the client (`client.py`) and its gRPC half (`grpc_client.py`) both use it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cadre_desktop.host.fleetstate.tls import FLEET_NAME, FleetTls

#: gRPC keep-alive: etcd refuses pings more often than every 5 s (its --grpc-keepalive-min-time);
#: a frozen member's connection is dropped after these two, and the next member is tried.
KEEPALIVE_MS = 10000
KEEPALIVE_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def channel_target(endpoints: Sequence[Endpoint]) -> str:
    """One gRPC target for every member: `ipv4:a:1,b:2` (or `dns:` for a single host name)."""
    if not endpoints:
        raise ValueError("a fleet store needs at least one endpoint")
    if len(endpoints) == 1 and not endpoints[0].host[:1].isdigit():
        return f"dns:///{endpoints[0]}"
    return "ipv4:" + ",".join(str(e) for e in endpoints)


def channel_options(tls: FleetTls | None) -> list[tuple[str, Any]]:
    options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 2000),
        # Each channel its own connections: gRPC otherwise shares them process-wide by address,
        # and one made for a closed client (another key, a cluster since gone) lingered, retrying.
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if tls is not None:
        options.append(("grpc.ssl_target_name_override", FLEET_NAME))
    return options
