"""Donated mode: a node a host runs for someone else's party, until one of its owners seeds it.

Started with ``CADRE_DONATION_ID`` (and the variables below) instead of a claim
secret or an invitation. The node answers ``awaiting_seed`` until ``POST /seed``
brings, with the host's seed token, a seed signed by one of the pinned owner
keys; then ``seeded``, persisted, so a respawned node comes back seeded.

Order of checks in :func:`accept_seed`, like a claim: the throttle first (a
locked-out client learns nothing), then the seed token (only the host has it,
so a wrong one is a guess and counts against the caller), then the seed itself.
A bad seed does not count against the caller: it comes through the host, whose
address must never be locked out by a borrower's mistake.

It asks of the node only what a `Seedable` names (node.py's `Node` is one): this
module is read by the node's config, so it never imports the node.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cadre_desktop.node.clock import Clock
from cadre_desktop.node.errors import ConfigError
from cadre_desktop.node.state import NodeState, SeedRecord, StateStore
from cadre_desktop.wire.ratelimit import FailureLimiter
from cadre_desktop.wire.refusal import RequestRefused
from cadre_desktop.wire.seed import (
    DEFAULT_PROFILE,
    MAX_BOOTSTRAP_NODES,
    MAX_OWNER_KEYS,
    PROFILE_WORDS,
    PROFILES,
    SeedError,
    check_bootstrap_address,
    is_id,
    parse_key,
    parse_seed,
)

log = logging.getLogger("cadre.node.donated")

DONATED_VARIABLES = (
    "CADRE_DONATION_ID",
    "CADRE_PARTY_ID",
    "CADRE_OWNER_KEYS",
    "CADRE_BOOTSTRAP_NODES",
    "CADRE_PROFILE",
    "CADRE_SEED_TOKEN",
)


@dataclass(frozen=True)
class DonatedConfig:
    donation_id: str
    party_id: str
    owner_keys: tuple[bytes, ...]
    bootstrap_nodes: tuple[str, ...]
    profile: str
    seed_token: str

    def __repr__(self) -> str:  # the seed token never reaches a log through repr()
        return (
            f"DonatedConfig(donation_id={self.donation_id!r}, party_id={self.party_id!r}, "
            f"owner_keys={len(self.owner_keys)}, bootstrap_nodes={len(self.bootstrap_nodes)}, "
            f"profile={self.profile!r})"
        )

    __str__ = __repr__


def load_donated(env: Mapping[str, str], check_token) -> DonatedConfig | None:
    """The donated-mode variables, or None when ``CADRE_DONATION_ID`` is not set.

    ``check_token`` is the claim secret's check (length, printable), shared so a
    seed token obeys the same rules without its value ever reaching a message.
    """
    donation_id = env.get("CADRE_DONATION_ID", "").strip()
    if not donation_id:
        stray = [name for name in DONATED_VARIABLES[1:] if env.get(name, "").strip()]
        if stray:
            raise ConfigError(f"{stray[0]} is set but CADRE_DONATION_ID is not")
        return None
    _check_id("CADRE_DONATION_ID", donation_id)
    party_id = env.get("CADRE_PARTY_ID", "").strip()
    if not party_id:
        raise ConfigError("CADRE_PARTY_ID is not set")
    _check_id("CADRE_PARTY_ID", party_id)
    seed_token = env.get("CADRE_SEED_TOKEN", "")
    if not seed_token:
        raise ConfigError("CADRE_SEED_TOKEN is not set")
    check_token("CADRE_SEED_TOKEN", seed_token)
    profile = env.get("CADRE_PROFILE", "").strip() or DEFAULT_PROFILE
    if profile not in PROFILES:
        raise ConfigError(f"CADRE_PROFILE must be {PROFILE_WORDS} (got {profile[:40]!r})")
    return DonatedConfig(
        donation_id=donation_id,
        party_id=party_id,
        owner_keys=_owner_keys(env.get("CADRE_OWNER_KEYS", "")),
        bootstrap_nodes=_bootstrap_nodes(env.get("CADRE_BOOTSTRAP_NODES", "")),
        profile=profile,
        seed_token=seed_token,
    )


def _check_id(name: str, value: str) -> None:
    """The rule of `seed.is_id`, in the words of a node's environment."""
    if not is_id(value):
        raise ConfigError(
            f"{name} must be 1-64 characters of letters, digits, '.', '_' or '-',"
            f" starting with a letter or digit (got {value[:80]!r})"
        )


def _owner_keys(text: str) -> tuple[bytes, ...]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ConfigError("CADRE_OWNER_KEYS is not set (comma-separated base64url Ed25519 public keys)")
    if len(items) > MAX_OWNER_KEYS:
        raise ConfigError(f"CADRE_OWNER_KEYS holds {len(items)} keys; at most {MAX_OWNER_KEYS}")
    keys = []
    for number, item in enumerate(items, 1):
        try:
            keys.append(parse_key(item))
        except SeedError as err:
            raise ConfigError(f"CADRE_OWNER_KEYS key {number}: {err}") from None
    return tuple(dict.fromkeys(keys))


def _bootstrap_nodes(text: str) -> tuple[str, ...]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if len(items) > MAX_BOOTSTRAP_NODES:
        raise ConfigError(
            f"CADRE_BOOTSTRAP_NODES holds {len(items)} addresses; at most {MAX_BOOTSTRAP_NODES}"
        )
    for number, item in enumerate(items, 1):
        try:
            check_bootstrap_address(item)
        except SeedError as err:
            raise ConfigError(f"CADRE_BOOTSTRAP_NODES address {number}: {err}") from None
    return tuple(items)


class Donating(Protocol):
    """A node's configuration, as far as donated mode reads it (node/config.py's `NodeConfig`)."""

    @property
    def donated(self) -> DonatedConfig | None: ...


class Seedable(Protocol):
    """What accepting a seed asks of the node (node/node.py's `Node`)."""

    peer_id: str
    store: StateStore
    clock: Clock
    seed_limiter: FailureLimiter

    @property
    def config(self) -> Donating: ...

    def check_throttle(self, limiter: FailureLimiter, client: str) -> None: ...

    def note_transition(self, old: str, new: str, why: str) -> None: ...

    def status(self) -> dict[str, Any]: ...


def seeded_record(donated: DonatedConfig | None, seed: SeedRecord | None) -> SeedRecord | None:
    """The persisted seed (`seed`), if it is for this very donation and party."""
    if donated is None or seed is None:
        return None
    if seed.donation_id != donated.donation_id or seed.party_id != donated.party_id:
        return None
    return seed


def accept_seed(node: Seedable, client: str, token: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """The body of ``POST /seed``: check the token and the seed, then persist it."""
    donated = node.config.donated
    if donated is None:
        raise RequestRefused("this node was not lent to a party; it takes no seed", code="not_donated")
    node.check_throttle(node.seed_limiter, client)
    if not token:
        raise RequestRefused("send the seed token as 'Authorization: Bearer <token>'", code="unauthorized")
    if not hmac.compare_digest(token.encode("utf-8", "replace"), donated.seed_token.encode()):
        node.seed_limiter.failed(client)
        raise RequestRefused("the seed token is wrong", code="wrong_token")
    node.seed_limiter.succeeded(client)
    try:
        seed = parse_seed(body.get("seed"))
    except SeedError as err:
        raise RequestRefused(str(err), code="invalid_seed") from None
    if seed.donation_id != donated.donation_id:
        raise RequestRefused("the seed is for another donation", code="seed_mismatch")
    if seed.party_id != donated.party_id:
        raise RequestRefused("the seed is for another party", code="seed_mismatch")
    if seed.peer_id != node.peer_id:
        raise RequestRefused("the seed is for another node (its peer id differs)", code="seed_mismatch")
    if not any(hmac.compare_digest(seed.owner_key, key) for key in donated.owner_keys):
        raise RequestRefused("the seed is not signed by an owner key this node trusts", code="untrusted_key")
    if not seed.verifies():
        raise RequestRefused("the seed's signature does not verify", code="bad_signature")
    held = seeded_record(donated, node.store.state.seed)
    if held is not None:
        if hmac.compare_digest(held.signature, seed.signature.hex()):
            return _answer(node)  # the same seed again: a retry after a lost answer
        raise RequestRefused("this node is already seeded by its party", code="already_seeded")
    now = node.clock.wall()

    def change(state: NodeState) -> None:
        state.seed = SeedRecord(
            donation_id=seed.donation_id,
            party_id=seed.party_id,
            owner_key=seed.owner_key.hex(),
            signature=seed.signature.hex(),
            seeded_at=now,
        )

    node.store.update(change)
    node.note_transition("awaiting_seed", "seeded", f"seeded for party {seed.party_id!r}")
    return _answer(node)


def _answer(node: Seedable) -> dict[str, Any]:
    status = node.status()
    return {"state": status["state"], "party": status["party"], "peer_id": node.peer_id}
