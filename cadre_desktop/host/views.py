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
    #: What ended its last start, in words ("exited with code 3: <its last line>",
    #: "never answered within 15 s"), while the node is down or starting again.
    last_exit: str | None = None
    #: The exit code of its last child while it is down, when known.
    exit_code: int | None = None
    #: "keyring" while it waits for the keyring to start (no attempt is spent).
    waiting_for: str | None = None
    #: The supervisor's last verdict on it: decision, at, ms, error.
    last_decision: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
