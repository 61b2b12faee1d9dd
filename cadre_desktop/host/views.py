"""What the outside sees of a node: one read-only view, the same for UI, API and CLI."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class NodeView:
    id: str
    name: str
    status: str
    mode: str
    running: bool
    #: The running child has answered GET /status (it can be claimed now).
    ready: bool
    pid: int | None
    api_port: int | None
    p2p_port: int | None
    peer_id: str | None
    cadre: str | None
    attempts: int
    #: ISO-8601 UTC time of the next respawn attempt while backing off, else None.
    next_retry_at: str | None
    last_error: str | None
    #: Only while unclaimed; carries the claim secret in its fragment.
    claim_url: str | None
    advertise_host: str
    created_at: str
    updated_at: str
    started_at: str | None
    log_path: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
