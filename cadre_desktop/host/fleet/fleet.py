"""The fleet service: this computer's place among the computers it is paired with.

What the Host, the control API and the CLI call: `invite` (a code, 10 minutes, single use),
`join` (pair by a code), `computers` (`fleet list`), `rename`, `remove` (unpinned here at once,
unpaired there when it answers), `all_nodes` (every computer's nodes, each with its `computer`)
and `forward` (a node call for a node another computer hosts, over the link; a link that drops
is "not done"), `log_tail` (another computer's node's log). It owns the link's server (on
`bind_host:fleet_port` once this computer is paired or invites), the reachability task and the sleep
watch (host/fleet/sleepwatch.py: the others told before a sleep, `asleep`; checked at the wake).
The inviter introduces a joiner to the computers it is paired with, and them to it: a fleet.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cadre_desktop.errors import Invalid, InvalidState, MachineError, NoSuchThing, SecretsError
from cadre_desktop.host.core.clock import Clock
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.core.vault.secrets import SecretKind, SecretStore
from cadre_desktop.host.fleet import load, pairing
from cadre_desktop.host.fleet.computers import Computer, FleetDoc, FleetFile, check_address, check_name, is_computer_id, new_computer_id
from cadre_desktop.host.fleet.identity import Identity, make_identity, server_context
from cadre_desktop.host.fleet.link import LinkServer
from cadre_desktop.host.fleet.link_api import LinkApi, LocalNodes, as_view
from cadre_desktop.host.fleet.pairing_code import VALID_S, CodeRefused, Invitations, parse_code
from cadre_desktop.host.fleet.peers import LinkDown, Peers, Reachability
from cadre_desktop.host.fleet.sleepwatch import SleepWatch
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.settings import Settings
from cadre_desktop.text import LOG_LINES, log_lines, one_line, url_host

if TYPE_CHECKING:
    import ssl

__all__ = ["Fleet", "FleetFile", "as_view"]

log = logging.getLogger(__name__)

LIST_S = 5.0


class FleetPortBusy(MachineError):
    code = "fleet_port_busy"


class Fleet:
    def __init__(self, *, file: FleetFile, settings: Callable[[], Settings], secrets: SecretStore, clock: Clock,
                 host: LocalNodes, advertise_host: Callable[[], str]) -> None:
        self._file = file
        self._settings = settings  # read at each use: the host's, as preferences change them
        self._secrets = secrets
        self._clock = clock
        self._host = host
        self._advertise = advertise_host
        self.doc = FleetDoc()
        self._unsaved = False
        self._unkept = False  # a key made for an invite or a join, not kept until a pairing succeeds
        self._identity: Identity | None = None
        self._context: ssl.SSLContext | None = None
        self.invitations = Invitations()
        self.peers = Peers(self.identity)
        self.reach = Reachability(self.peers, lambda: self.doc.computers, clock)
        self.server: LinkServer | None = None
        self._task: asyncio.Future[None] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._save_lock = asyncio.Lock()
        self._serve_lock = asyncio.Lock()
        self._identity_lock = asyncio.Lock()
        self._where: dict[str, str] = {}  # node id -> the computer id that hosted it when last listed
        self.remote: list[NodeView] = []  # the other computers' nodes as last listed (the tray's window shows them)
        #: This host runs in the tray app (set by its shell): it tells give-ups, its own and maybe others'.
        self.has_tray = False
        #: The fleet's shared state's link calls (`/fleet/run/...`, host/fleetrun/run_api.py), once wired.
        self.run_api: Callable[[Any, Computer], Awaitable[Any]] | None = None
        #: Computers that unpaired themselves from this one (host/fleetrun leaves their etcd members be).
        self.unpaired_by_them: set[str] = set()
        #: logind's sleep signals (host/fleet/sleepwatch.py): the others told before a sleep, checked at the wake.
        self.sleepwatch = SleepWatch(going=self.announce_sleep, woke=self.woke, paired=lambda: bool(self.doc.computers))
        self._watching: asyncio.Future[None] | None = None
        self.going_to_sleep = False  # said so (until the wake): `/fleet/hello` answers so, the others keep it asleep

    @classmethod
    def read(cls, file: FleetFile, settings: Callable[[], Settings], secrets: SecretStore, clock: Clock, host: LocalNodes,
             advertise_host: Callable[[], str]) -> Fleet:
        """The fleet as `fleet.json` says (the host's start reads it with its other files)."""
        fleet = cls(file=file, settings=settings, secrets=secrets, clock=clock, host=host, advertise_host=advertise_host)
        fleet.load()
        return fleet

    @property
    def settings(self) -> Settings:
        return self._settings()

    # -- life ------------------------------------------------------------------

    def load(self) -> None:
        """Read fleet.json (a bad one stops the host's start); this computer's id, given once (written
        by `start`, so a start refused later leaves every file as it was)."""
        self.doc = self._file.load()
        if self.doc.self_id is None:
            self.doc = replace(self.doc, self_id=new_computer_id())
            self._unsaved = True

    async def start(self) -> None:
        if self._unsaved:
            await self._save()
            self._unsaved = False
        if self.doc.computers:  # on a task: a keyring that waits for its unlock must not hold the host's start
            self._starting = asyncio.ensure_future(self._serve_or_say())

    async def _serve_or_say(self) -> None:
        try:
            await self._serve()
        except (SecretsError, FleetPortBusy) as exc:
            log.error("fleet: the link is not served: %s", exc.message)

    async def stop(self) -> None:
        for task in (self._starting, self._task, self._watching):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._starting = self._task = self._watching = None
        await self.sleepwatch.stop()
        server, self.server = self.server, None
        if server is not None:
            await server.stop()
        await self.peers.close()

    @property
    def self_id(self) -> str:
        assert self.doc.self_id is not None  # load gave it one
        return self.doc.self_id

    @property
    def name(self) -> str:
        return self.settings.computer_name or (check_name(socket.gethostname()) or "computer")

    def self_ref(self) -> JSONObject:
        return {"id": self.self_id, "name": self.name}

    @property
    def address(self) -> str:
        return f"{url_host(self._advertise())}:{self.settings.fleet_port}"

    def identity(self) -> Identity:
        if self._identity is None:
            raise InvalidState("This computer has no fleet key loaded yet.")
        return self._identity

    async def load_identity(self) -> Identity:
        """This computer's fleet key and certificate (from the keyring; host/fleetrun's etcd TLS)."""
        return await self._load_identity()

    async def _load_identity(self) -> Identity:
        """This computer's key from the keyring (made and kept there the first time, once)."""
        async with self._identity_lock:
            return await self._identity_once()

    async def _identity_once(self) -> Identity:
        if self._identity is not None:
            return self._identity
        key = await self._secrets.get(self.self_id, SecretKind.FLEET_KEY)
        cert = self.doc.self_cert
        if key is None or cert is None:
            if self.doc.computers:
                raise SecretsError("This computer's fleet key is missing from the keyring; pair it again "
                                   "(remove it on the other computers, then 'cadre-desktop fleet join').")
            from cadre_desktop.net.plainasync import enable_asyncio_tls

            enable_asyncio_tls()
            # Kept (the keyring, fleet.json) at the first pairing only: a refused code changes nothing.
            self._identity, self._unkept = await asyncio.to_thread(make_identity, self.self_id), True
            return self._identity
        from cadre_desktop.net.plainasync import enable_asyncio_tls

        enable_asyncio_tls()
        self._identity = Identity(self.self_id, cert, key)
        return self._identity

    async def _serve(self) -> None:
        """The link's server and the reachability checks, once (this computer is paired, or invites)."""
        async with self._serve_lock:  # an invite and the start's task at once make one key, one server
            await self._serve_once()

    async def _serve_once(self) -> None:
        await self._load_identity()
        if self.server is None:
            server = LinkServer(context=self._server_context, pinned=lambda print_: self.doc.by_fingerprint(print_),
                                handler=LinkApi(self._host, self), pair=self._answer_joiner,
                                can_pair=lambda: self._invitations_open())
            try:
                await server.start(self.settings.bind_host, self.settings.fleet_port)
            except OSError as exc:
                raise FleetPortBusy(f"The fleet link cannot listen on {self.settings.bind_host}:{self.settings.fleet_port} "
                                    f"({exc.strerror or exc}): free the port, or change 'fleet_port' in settings.json.") from None
            self.server = server
        if self._task is None:
            self._task = asyncio.ensure_future(self.reach.run())
        if self._watching is None:  # on a task: a system bus that does not answer holds nothing up
            self._watching = asyncio.ensure_future(self.sleepwatch.start())

    def _server_context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = server_context(self.identity(), [c.cert for c in self.doc.computers])
        return self._context

    def _invitations_open(self) -> bool:
        self.invitations.expire(self._clock.monotonic())
        return self.invitations.any_open

    async def _keep_identity(self) -> None:
        """This computer's new key into the keyring, its certificate into fleet.json: at its first pairing."""
        if self._unkept and self._identity is not None:
            await self._secrets.set(self.self_id, SecretKind.FLEET_KEY, self._identity.key)
            self.doc = replace(self.doc, self_cert=self._identity.cert)
            self._unkept = False

    async def _pin(self, computer: Computer) -> None:
        ours = self._identity.cert if self._identity is not None else self.doc.self_cert
        if computer.id == self.self_id or computer.cert == ours:
            raise Invalid("A computer cannot pair with itself.")
        await self._keep_identity()
        self.doc = self.doc.with_computer(computer)
        self._context = None  # the next handshake trusts the new set
        await self.peers.forget(computer.id)
        await self._save()
        await self.sleepwatch.paired_now()  # watching (started with the server): the delay lock from now on

    async def _unpin(self, computer_id: str) -> Computer | None:
        computer = self.doc.get(computer_id)
        if computer is not None:
            self.doc = self.doc.without(computer_id)
            self._context = None
            await self.peers.forget(computer_id)
            await self._save()
            self.sleepwatch.unpaired() if not self.doc.computers else None  # no fleet to tell: no lock held
        return computer

    async def _save(self) -> None:
        async with self._save_lock:
            await asyncio.to_thread(self._file.save, self.doc)

    # -- pairing -------------------------------------------------------------------

    def _identity_doc(self, introduce: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.self_id, "name": self.name, "address": self.address,
                               "cert": self.identity().cert}
        if introduce:
            doc["introduce"] = [_row(c) for c in self.doc.computers]
        return doc

    async def invite(self) -> JSONObject:
        """A pairing code (10 minutes, single use, a few tries) and where to send it."""
        await self._serve()
        now = self._clock.now()
        invitation = self.invitations.open(self._clock.monotonic(), (now + timedelta(seconds=VALID_S)).isoformat())
        log.info("fleet: a pairing code was made (slot %d), valid until %s", invitation.code.slot, invitation.expires_wall)
        return {"code": str(invitation.code), "expires_at": invitation.expires_wall, "address": self.address}

    async def _answer_joiner(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str) -> None:
        async def pin(theirs: dict[str, Any], seen_from: str) -> dict[str, Any]:
            computer = _computer(theirs, self._clock)
            introduced = [c for c in self.doc.computers if c.id != computer.id]
            await self._pin(computer)
            self.reach.heard(computer.id)
            for other in introduced:  # the fleet's others learn of it, and it of them (in our answer)
                asyncio.ensure_future(self._introduce(other, computer))
            return theirs

        await pairing.answer_joiner(reader, writer, where, self.invitations, self._clock.monotonic(),
                                    lambda: self._identity_doc(True), pin)

    async def _introduce(self, to: Computer, newcomer: Computer) -> None:
        try:
            await self.peers.ask_json(to, "POST", "/fleet/introduce", {"computers": [_row(newcomer)]})
        except LinkDown as exc:
            log.warning("fleet: could not introduce %s to %s: %s", newcomer.id, to.id, exc.message)

    async def join(self, code_text: str, address: str | None) -> dict[str, Any]:
        """Pair with the computer that showed `code_text`; the computers now paired."""
        code = parse_code(code_text)
        if address is None:
            raise Invalid("Give the inviting computer's address too: 'cadre-desktop fleet invite' (or Add a computer…) "
                          "shows it with the code (cadre-desktop fleet join CODE ADDRESS).")
        where = check_address(address) or check_address(f"{address}:{self.settings.fleet_port}")
        if where is None:
            raise Invalid("The address is host or host:port.")
        await self._load_identity()
        theirs = await pairing.join(code, where, self._identity_doc(False))
        inviter = _computer(theirs, self._clock)
        await self._pin(inviter)
        self.reach.heard(inviter.id)
        await self.introduced(inviter, {"computers": theirs.get("introduce", [])})
        await self._serve()
        return {"paired": inviter.ref(), "computers": self.computers()["computers"]}

    async def introduced(self, by: Computer, doc: object) -> None:
        """`by` (pinned) names computers of the fleet; each new one is pinned (never ourselves)."""
        rows = doc.get("computers") if isinstance(doc, dict) else None
        if not isinstance(rows, list) or len(rows) > 32:
            raise Invalid("An introduction is {\"computers\": [...]}.")
        for row in rows:
            try:
                computer = replace(Computer.from_json(row), paired_at=self._clock.now().isoformat())
            except ValueError:
                log.warning("fleet: %s introduced a computer that is not valid; ignored", by.id)
                continue
            if computer.id != self.self_id and self.doc.get(computer.id) is None:
                await self._pin(computer)
                log.info("fleet: %s introduced %s (%s)", by.id, computer.name, computer.id)

    async def unpaired_by(self, computer: Computer) -> None:
        self.unpaired_by_them.add(computer.id)  # the fleet's etcd: that side removes our member, we not theirs
        await self._unpin(computer.id)
        log.info("fleet: %s (%s) unpaired itself", computer.name, computer.id)

    def peer_sleeping(self, computer: Computer) -> None:
        self.reach.asleep(computer.id)

    async def announce_sleep(self) -> None:
        """Tell every computer that answers that this one goes to sleep now (best effort, 1 s at most):
        they show it `asleep` rather than unreachable until it answers again."""
        self.going_to_sleep = True
        online = [c for c in self.doc.computers if self.reach.of(c.id).state == "online"]
        await asyncio.gather(*(self.peers.ask(c, "POST", "/fleet/sleeping", {}, timeout_s=1.0) for c in online),
                             return_exceptions=True)

    async def woke(self) -> None:
        """Back from sleep: awake again for the others' checks, and every peer checked now (not in `CHECK_S`)."""
        self.going_to_sleep = False
        await self.reach.check_all()

    def hello(self) -> JSONObject:
        return {"id": self.self_id, "name": self.name, "time": self._clock.now().isoformat(), "tray": self.has_tray,
                "going_to_sleep": self.going_to_sleep,
                "load": load.here()}

    def notifies_for(self, computer_id: str) -> bool:
        """Whether this tray tells the give-ups of `computer_id`'s nodes, so the fleet tells each once: the
        hosting computer's own tray when it has one and answers, else the online tray of the smallest id."""
        if not self.has_tray or computer_id == self.self_id:
            return False
        host = self.reach.of(computer_id)
        if host.state == "online" and host.tray:
            return False
        trays = [self.self_id] + [c.id for c in self.doc.computers
                                  if c.id != computer_id and self.reach.of(c.id).state == "online" and self.reach.of(c.id).tray]
        return min(trays) == self.self_id

    # -- what a person asks ----------------------------------------------------------

    def computers(self) -> dict[str, Any]:
        rows: list[JSONObject] = [{"id": self.self_id, "name": self.name, "address": self.address,
                                   "state": "online", "self": True, "last_seen": self._clock.now().isoformat(),
                                   "listening": self.server is not None and self.server.listening, "load": load.here()}]
        for c in self.doc.computers:
            state = self.reach.of(c.id)
            rows.append({"id": c.id, "name": c.name, "address": c.address, "state": state.state, "self": False,
                         "last_seen": state.last_seen, "unreachable_since": state.since,
                         "clock_offset_ms": state.clock_offset_ms, "fingerprint": c.fingerprint,
                         "paired_at": c.paired_at, "load": state.load})
        return {"computers": rows}

    def _peer(self, computer_id: str) -> Computer:
        computer = self.doc.get(computer_id) if is_computer_id(computer_id) else None
        if computer is None:
            raise NoSuchThing(f"No computer {computer_id!r} is paired with this one.")
        return computer

    async def rename(self, computer_id: str, name: object) -> JSONObject:
        new = check_name(name.strip() if isinstance(name, str) else name)
        if new is None:
            raise Invalid("A computer's name is 1 to 64 printable characters.")
        if computer_id == self.self_id:
            raise InvalidState("This computer's own name is the 'computer_name' setting (Preferences, settings.json).")
        await self._pin(replace(self._peer(computer_id), name=new))
        return self._peer(computer_id).ref()

    async def remove(self, computer_id: str) -> JSONObject:
        """Unpin at once; then ask that computer to unpin us too (it may not be reachable)."""
        computer = self._peer(computer_id)
        client_identity = self.identity() if self._identity is not None else None
        await self._unpin(computer_id)
        there = False
        if client_identity is not None:
            try:
                status, _ = await self.peers.ask_json(computer, "DELETE", "/fleet/pair", timeout_s=5.0)
                there = status == 200
            except LinkDown:
                there = False
            await self.peers.forget(computer_id)
        return {"removed": computer.ref(), "unpaired_there": there}

    # -- every computer's nodes ----------------------------------------------------------

    async def all_nodes(self) -> dict[str, Any]:
        """This computer's nodes and every reachable peer's, each with its computer; who did not answer."""
        await self._host.settled()
        nodes: list[Any] = [view.to_json() for view in self._host.list_nodes()]
        missing: list[dict[str, Any]] = []
        peers = list(self.doc.computers)
        # One known not to answer gets a short while: a sleeping computer must not hold every listing up.
        waits = [LIST_S if self.reach.of(c.id).state == "online" else 1.0 for c in peers]
        answers = await asyncio.gather(*(self.peers.ask_json(c, "GET", "/api/nodes", timeout_s=w) for c, w in zip(peers, waits, strict=True)),
                                       return_exceptions=True)
        for computer, got in zip(peers, answers, strict=True):
            if isinstance(got, BaseException) or got[0] != 200 or not isinstance(got[1].get("nodes"), list):
                missing.append({**computer.ref(), "error": getattr(got, "message", "it did not answer")})
                continue
            for node in got[1]["nodes"][:1000]:
                if isinstance(node, dict) and isinstance(node.get("id"), str):
                    node["computer"] = computer.ref()
                    self._where[node["id"]] = computer.id
                    nodes.append(node)
        return {"nodes": nodes, "unreachable": missing}

    async def host_of(self, node_id: str) -> Computer | None:
        """The paired computer that hosts `node_id` (asked again when not known), None when none does."""
        known = self._where.get(node_id)
        if known is None or self.doc.get(known) is None:
            await self.all_nodes()
            known = self._where.get(node_id)
        return self.doc.get(known) if known is not None else None

    async def refresh_remote(self) -> list[NodeView]:
        """The other computers' nodes, asked now (kept in `remote` for the window)."""
        if not self.doc.computers:
            self.remote = []
            return []
        listed = (await self.all_nodes())["nodes"]
        ours = self.self_id
        self.remote = [v for v in (as_view(n) for n in listed if (n.get("computer") or {}).get("id") != ours) if v]
        return self.remote

    def is_remote(self, node_id: str) -> bool:
        return node_id in self._where and self.doc.get(self._where[node_id]) is not None

    async def act(self, node_id: str, action: str) -> NodeView | None:
        """A person's action (retry, restart, pause, resume, remove) on another computer's node, over the
        link: its view after it, None after a remove; that computer's refusal raised in its words."""
        computer = await self.host_of(node_id)
        if computer is None:
            raise NoSuchThing(f"No computer of the fleet hosts a node {node_id!r}.")
        method, path = ("DELETE", f"/api/nodes/{node_id}") if action == "remove" else ("POST", f"/api/nodes/{node_id}/{action}")
        status, doc = await self.forward(computer, method, path, None if action == "remove" else {})
        if status != 200:
            raise InvalidState(f"{computer.name}: {_refusal(doc, status)}")
        if action == "remove":
            self._where.pop(node_id, None)
            return None
        view = as_view({**doc, "computer": computer.ref()}) if isinstance(doc, dict) else None
        return view

    async def log_tail(self, node_id: str, lines: int = LOG_LINES) -> list[str]:
        """Another computer's node's last lines (bounded, printable) for the window's log pane; LinkDown when
        that computer cannot be reached, its refusal raised in its words."""
        if (computer := await self.host_of(node_id)) is None:
            raise NoSuchThing(f"No computer of the fleet hosts a node {node_id!r}.")
        status, doc = await self.forward(computer, "GET", f"/api/nodes/{node_id}/logs", None)
        if status != 200 or not isinstance(doc, dict):
            raise InvalidState(f"{computer.name}: {_refusal(doc, status)}")
        return log_lines(doc.get("lines"), lines)

    async def forward(self, computer: Computer, method: str, path: str, body: Any) -> tuple[int, Any]:
        """A node call on the computer that hosts the node; LinkDown (not done) when the link fails."""
        if computer.id != self.self_id and self._identity is None:
            await self._load_identity()
        return await self.peers.ask_json(computer, method, path, body)

    async def forward_within(self, computer: Computer, method: str, path: str, body: Any, timeout_s: float) -> tuple[int, Any]:
        """`forward` with its own bound (a move's arrival takes longer than a node call)."""
        await self._load_identity()
        return await self.peers.ask_json(computer, method, path, body, timeout_s=timeout_s)


def _refusal(doc: Any, status: int) -> str:
    error = doc.get("error") if isinstance(doc, dict) else None
    return one_line(error.get("message", f"answered {status}") if isinstance(error, dict) else f"answered {status}", 300)


def _row(c: Computer) -> dict[str, Any]:
    return {"id": c.id, "name": c.name, "address": c.address, "fingerprint": c.fingerprint, "cert": c.cert,
            "paired_at": c.paired_at}


def _computer(doc: dict[str, Any], clock: Clock) -> Computer:
    try:
        return Computer.from_json({**{k: doc.get(k) for k in ("id", "name", "address", "cert")},
                                   "paired_at": clock.now().isoformat()})
    except ValueError as exc:
        raise CodeRefused(f"The other computer's identity is not valid ({exc}); not paired.") from None
