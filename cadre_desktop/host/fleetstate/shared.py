"""The fleet's shared state on etcd: who holds each node, at which generation, and each computer's lease.

Keys, under `PREFIX` (`/cadre/fleet/v1/`), each value short text or a small JSON document:

    nodes/<node>/holder        the computer that holds the node (its id)
    nodes/<node>/generation    the node's generation, its fencing token: 1, 2, … (each take +1)
    nodes/<node>/start         the start mark of the last take (`StartMark`, JSON)
    nodes/<node>/served        the highest generation that answered: a mark below it is spent
    nodes/<node>/failover      "on" when the node may be taken over by another computer
    nodes/<node>/replicas/<computer>  that computer keeps the node's replica (the generation it
                               was sent at): a taker of the node is chosen among them
    computers/<computer>/lease this computer's lease (JSON: its id and time to live), put
                               under that lease, so the key is gone the moment it expires

`take` is one transaction: if the generation (and the holder, when known) is still what
the taker read (and, for a failover's take, the holder still has no lease key), it writes
the taker as holder, the generation + 1 and the start mark, all or nothing; else it changes
nothing and answers what it found. Two computers racing for a node read the same
generation, so exactly one transaction succeeds. `mark_served`
spends a start mark only while its generation still holds the node.

Everything read back is hostile until checked (`parse_node`): another computer's host,
or anything that can reach the store, wrote it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from cadre_desktop.errors import NodeFault
from cadre_desktop.host.fleetstate.client import FleetClient
from cadre_desktop.text import clean

PREFIX = b"/cadre/fleet/v1/"
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
MAX_MARK_BYTES = 2048
MAX_WORDS = 300


class SharedStateInvalid(NodeFault):
    """A value under the fleet's keys is not what a host writes there."""

    code = "fleet_state_invalid"


def _id(value: str, what: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        raise ValueError(f"{what} {value!r} is not an id the fleet's keys can hold")
    return value


def node_prefix(node: str) -> bytes:
    return PREFIX + b"nodes/" + _id(node, "node").encode() + b"/"


def node_key(node: str, field: str) -> bytes:
    return node_prefix(node) + field.encode()


COMPUTERS = PREFIX + b"computers/"


def lease_key(computer: str) -> bytes:
    return COMPUTERS + _id(computer, "computer").encode() + b"/lease"


def lease_owner(key: bytes) -> str | None:
    """Whose lease key `key` is (`computers/<computer>/lease`), or None when it is no such key."""
    if not key.startswith(COMPUTERS) or not key.endswith(b"/lease"):
        return None
    name = key[len(COMPUTERS):-len(b"/lease")].decode("ascii", "replace")
    return name if ID_PATTERN.fullmatch(name) else None


@dataclass(frozen=True)
class StartMark:
    """Seed 003's start mark, across computers: the generation a take started, when (wall clock,
    the taker's), by which computer, the failed starts right before it and what was seen of the last."""

    generation: int
    at: float
    by: str
    failures: int = 0
    last_exit: str | None = None

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "generation": self.generation, "at": self.at, "by": self.by,
                           "failures": self.failures, "last_exit": self.last_exit}).encode()


@dataclass(frozen=True)
class NodeShared:
    """What the store says of one node (generation 0 and no holder: never taken)."""

    node: str
    holder: str | None = None
    generation: int = 0
    mark: StartMark | None = None
    served: int = 0
    failover: bool = False
    #: The computers that said they keep the node's replica (`nodes/<node>/replicas/<computer>`).
    replicas: frozenset[str] = frozenset()

    @property
    def mark_spent(self) -> bool:
        return self.mark is None or self.served >= self.mark.generation


def _int(raw: bytes, what: str) -> int:
    text = raw.decode("ascii", "replace")
    if not text.isdigit() or len(text) > 19:
        raise SharedStateInvalid(f"the fleet's store holds a {what} that is not a number")
    return int(text)


def _mark(raw: bytes) -> StartMark | None:
    """A start mark, or None when unreadable (an unreadable mark gives no grace, as in the seed)."""
    if len(raw) > MAX_MARK_BYTES:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != 1:
            return None
        generation, at, failures = doc["generation"], doc["at"], doc["failures"]
        by = clean(doc["by"], 128)
        if not (isinstance(generation, int) and isinstance(failures, int) and isinstance(at, (int, float))) \
                or by is None or generation < 1 or failures < 0:
            return None
        words = clean(doc.get("last_exit"), MAX_WORDS) if doc.get("last_exit") is not None else None
        return StartMark(generation, float(at), by, min(failures, 1000), words)
    except (ValueError, KeyError, TypeError):
        return None


def parse_node(node: str, found: dict[bytes, bytes]) -> NodeShared:
    """A node's keys (as `get_prefix` or a transaction's range gives them) made a `NodeShared`."""
    prefix = node_prefix(node)
    fields = {k[len(prefix):].decode("ascii", "replace"): v for k, v in found.items() if k.startswith(prefix)}
    holder = None
    if "holder" in fields:
        holder = fields["holder"].decode("ascii", "replace")
        if not ID_PATTERN.fullmatch(holder):
            raise SharedStateInvalid("the fleet's store names a holder that is not a computer id")
    return NodeShared(
        node=node, holder=holder,
        generation=_int(fields["generation"], "generation") if "generation" in fields else 0,
        mark=_mark(fields["start"]) if "start" in fields else None,
        served=_int(fields["served"], "served generation") if "served" in fields else 0,
        failover=fields.get("failover") == b"on",
        replicas=frozenset(name[9:] for name in fields if name.startswith("replicas/") and ID_PATTERN.fullmatch(name[9:])),
    )


@dataclass(frozen=True)
class TakeResult:
    """A take's outcome: won (the node is the taker's at `generation`), or what the store holds now."""

    won: bool
    generation: int
    found: NodeShared | None = None


class SharedState:
    """The fleet's shared state over a bounded client."""

    def __init__(self, client: FleetClient) -> None:
        self.client = client

    async def read_node(self, node: str) -> NodeShared:
        return parse_node(node, await self.client.get_prefix(node_prefix(node)))

    async def take(self, node: str, computer: str, expected: int, *, holder: str | None,
                   mark_at: float, failures: int = 0, last_exit: str | None = None, lost: bool = False) -> TakeResult:
        """Make `computer` the holder of `node` at generation `expected + 1`, with its start mark,
        if the node is still at `expected` held by `holder` (None: by no one); else nothing.

        `lost` (a failover's take): also only while `holder` has no lease key. A holder that got a new
        lease and announced it before this transaction may have read the node as its own under that
        lease and be running it on a deadline ahead (host/fleetrun/holding.py): taking it then would
        make two copies with a future deadline. Seen before the take, it keeps its node."""
        ops = self.client.ops

        def key(field: str) -> bytes:
            return node_key(node, field)
        compare: list[Any] = [ops.version(key("generation")) == 0 if expected == 0
                              else ops.value(key("generation")) == str(expected).encode()]
        compare.append(ops.version(key("holder")) == 0 if holder is None
                       else ops.value(key("holder")) == _id(holder, "holder").encode())
        if lost and holder is not None:
            compare.append(ops.version(lease_key(holder)) == 0)
        mark = StartMark(expected + 1, mark_at, _id(computer, "computer"), failures, last_exit)
        success = [ops.put(key("holder"), computer.encode()), ops.put(key("generation"), str(expected + 1).encode()),
                   ops.put(key("start"), mark.encode())]
        prefix = node_prefix(node)
        failure = [ops.get(prefix, _prefix_end(prefix))]
        won, answers = await self.client.transaction(compare, success, failure)
        if won:
            return TakeResult(True, expected + 1)
        rows = answers[0] if answers else []
        found = parse_node(node, {got.key: value for value, got in rows})
        return TakeResult(False, found.generation, found)

    async def mark_served(self, node: str, computer: str, generation: int) -> bool:
        """The copy of `generation` answered: its mark is spent, if it still holds the node."""
        ops = self.client.ops
        compare = [ops.value(node_key(node, "generation")) == str(generation).encode(),
                   ops.value(node_key(node, "holder")) == _id(computer, "computer").encode()]
        won, _ = await self.client.transaction(compare, [ops.put(node_key(node, "served"), str(generation).encode())])
        return won

    async def set_failover(self, node: str, on: bool) -> None:
        await self.client.put(node_key(node, "failover"), b"on" if on else b"off")

    async def keeps_replica(self, node: str, computer: str, generation: int | None) -> None:
        """`computer` keeps the node's replica (sent at `generation`), or no longer does (None)."""
        key = node_key(node, "replicas/" + _id(computer, "computer"))
        if generation is None:
            await self.client.delete(key)
        else:
            await self.client.put(key, str(generation).encode())

    async def announce(self, computer: str, lease_id: int, ttl_ms: int) -> None:
        """This computer's lease key, under the lease itself: gone when the lease expires."""
        doc = json.dumps({"version": 1, "lease": lease_id, "ttl_ms": ttl_ms}).encode()
        await self.client.put(lease_key(computer), doc, lease_id=lease_id)

    async def lease_alive(self, computer: str) -> bool:
        """Whether the store still has `computer`'s lease key (its lease has not expired)."""
        return await self.client.get(lease_key(computer)) is not None

    async def leases_alive(self) -> set[str]:
        """The computers whose lease key the store still has, in one read."""
        found = await self.client.get_prefix(COMPUTERS)
        return {owner for key in found if (owner := lease_owner(key)) is not None}


def _prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of every key that starts with `prefix` (etcd's range_end)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])
