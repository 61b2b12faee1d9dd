"""Asking paired computers over the fleet link, and knowing which of them answer.

Each peer has one `Client` (`net/httpclient.py`) whose TLS context trusts exactly the peer's pinned
certificate and shows ours: a computer with another key is refused in the handshake. A connection
is kept between requests (`KEEP_S`), so a reachability check costs a request, not a handshake.
`Reachability` asks every peer `GET /fleet/hello` every `CHECK_S` (bounded by `ASK_S`): online
(last seen, the clock's difference), or unreachable since the first check that failed; `asleep` when
the peer said it goes to sleep.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cadre_desktop.errors import MachineError
from cadre_desktop.host.core.clock import Clock
from cadre_desktop.host.fleet import load
from cadre_desktop.host.fleet.computers import Computer, split_address
from cadre_desktop.host.fleet.identity import Identity, client_context
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.net.httpclient import Client, ClientError, Response

log = logging.getLogger(__name__)

CHECK_S = 4.0
ASK_S = 3.0
ACT_S = 30.0
KEEP_S = 30.0
MAX_ANSWER = 4 * 1024 * 1024


class LinkDown(MachineError):
    """A paired computer could not be reached, or the link dropped before it answered: not done."""

    code = "computer_unreachable"


@dataclass
class PeerState:
    state: str = "unreachable"  # online | asleep | unreachable
    since: str | None = None
    last_seen: str | None = None
    clock_offset_ms: float | None = None
    error: str | None = None
    #: Its host runs the tray app (it tells its own nodes' give-ups: `Fleet.notifies_for`).
    tray: bool = False
    #: How busy it said it is at its last answer (`load.checked`), None when it did not say.
    load: JSONObject | None = None


class Peers:
    """One link client per paired computer, made when first asked, dropped when its pin changes."""

    def __init__(self, identity: Callable[[], Identity]) -> None:
        self._identity = identity
        self._clients: dict[str, tuple[str, Client]] = {}

    def _client(self, computer: Computer) -> Client:
        kept = self._clients.get(computer.id)
        if kept is not None and kept[0] == computer.fingerprint:
            return kept[1]
        client = Client(fresh_after_s=KEEP_S, max_body=MAX_ANSWER, tls=client_context(self._identity(), computer.cert))
        self._clients[computer.id] = (computer.fingerprint, client)
        return client

    async def forget(self, computer_id: str) -> None:
        kept = self._clients.pop(computer_id, None)
        if kept is not None:
            await kept[1].close()

    async def close(self) -> None:
        for computer_id in list(self._clients):
            await self.forget(computer_id)

    async def ask(self, computer: Computer, method: str, target: str, body: Any = None, *,
                  timeout_s: float = ACT_S) -> Response:
        """One request over the link; LinkDown when the computer cannot be reached or drops it."""
        host, port = split_address(computer.address)
        data = None if body is None else json.dumps(body).encode()
        headers = [("Content-Type", "application/json")] if data is not None else []
        try:
            async with asyncio.timeout(timeout_s):
                return await self._client(computer).request(host, port, method, target, headers=headers, body=data)
        except (OSError, TimeoutError, ClientError) as exc:
            await self.forget(computer.id)
            raise LinkDown(f"{computer.name} ({computer.id}) cannot be reached over the fleet link "
                           f"({type(exc).__name__}); the action is not known done there.") from None

    async def ask_json(self, computer: Computer, method: str, target: str, body: Any = None, *,
                       timeout_s: float = ACT_S) -> tuple[int, Any]:
        answer = await self.ask(computer, method, target, body, timeout_s=timeout_s)
        try:
            return answer.status, json.loads(answer.body or b"{}")
        except ValueError:
            raise LinkDown(f"{computer.name} answered something that is not JSON; nothing is known done.") from None


class Reachability:
    """Each peer's state, kept by a bounded periodic check (`run`, a task the fleet owns)."""

    def __init__(self, peers: Peers, computers: Callable[[], tuple[Computer, ...]], clock: Clock,
                 *, check_s: float = CHECK_S, on_change: Callable[[str], None] = lambda _id: None) -> None:
        self._peers = peers
        self._computers = computers
        self._clock = clock
        self.check_s = check_s
        self._on_change = on_change
        self.states: dict[str, PeerState] = {}

    def of(self, computer_id: str) -> PeerState:
        return self.states.setdefault(computer_id, PeerState())

    def asleep(self, computer_id: str) -> None:
        """It said it goes to sleep: `asleep` (not unreachable) until it answers again."""
        state = self.of(computer_id)
        if state.state != "asleep":
            state.state, state.since = "asleep", self._clock.now().isoformat()
            self._on_change(computer_id)

    def heard(self, computer_id: str) -> None:
        """It just paired with us (it spoke, over the link): `online` now, not at the next check."""
        state = self.of(computer_id)
        state.last_seen = self._clock.now().isoformat()
        if state.state != "online":
            state.state, state.since, state.error = "online", None, None
            self._on_change(computer_id)

    async def run(self) -> None:
        while True:
            try:
                await self.check_all()
            except Exception:  # a bug in one round must not end every later check
                log.exception("fleet: checking the paired computers failed")
            await self._clock.sleep(self.check_s)

    async def check_all(self) -> None:
        computers = self._computers()
        for gone in set(self.states) - {c.id for c in computers}:
            del self.states[gone]
        await asyncio.gather(*(self.check(c) for c in computers))

    async def check(self, computer: Computer) -> None:
        state, before = self.of(computer.id), self.of(computer.id).state
        sent = time.time()
        try:
            status, doc = await self._peers.ask_json(computer, "GET", "/fleet/hello", timeout_s=ASK_S)
            if status != 200 or not isinstance(doc, dict):
                raise LinkDown(f"answered {status}")
        except LinkDown as exc:
            if state.state != "unreachable" or state.since is None:
                state.since = self._clock.now().isoformat()
            state.state, state.error = ("asleep" if state.state == "asleep" else "unreachable"), exc.message
        else:
            state.state, state.since, state.error = ("asleep" if doc.get("going_to_sleep") else "online"), None, None
            state.last_seen = self._clock.now().isoformat()
            state.tray = doc.get("tray") is True
            state.load = load.checked(doc.get("load"))
            state.clock_offset_ms = _offset_ms(doc.get("time"), sent, time.time())
        if state.state != before:
            log.info("fleet: %s (%s) is %s", computer.name, computer.id, state.state)
            self._on_change(computer.id)


def _offset_ms(their: object, sent: float, back: float) -> float | None:
    """Their clock minus ours, in ms, taking the middle of the round trip as the moment they read it."""
    if not isinstance(their, str) or len(their) > 40:
        return None
    try:
        at = datetime.fromisoformat(their).timestamp()
    except ValueError:
        return None
    return round((at - (sent + back) / 2) * 1000, 1)
