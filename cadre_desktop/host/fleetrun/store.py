"""This computer's etcd member, supervised by its host, and the client of the fleet's store.

`FleetStore` runs one task (never the host's start: the start only creates it) that, once the
computer is paired, keeps its etcd member running and a bounded client of the fleet's members:

- the member listens on the computer's advertised address, `fleet_port` + 1 for clients and
  + 2 for peers, its data under `Paths.etcd_dir`; TLS from the fleet identity's key (in
  memory), its certificate signed by that key (it chains to the certificate the other
  computers pinned), trusting exactly the pinned certificates;
- a member with data restarts on it; one without asks each paired computer to add it
  (`POST /fleet/run/etcd/join`, answered by `join_asked`): one whose member runs adds it with
  `join_cluster` (as a learner), and this computer asks the others to promote its member to a
  voting one once it has caught up (`promote_member`); when every one answers it has no cluster and this computer's id is the
  smallest, this one makes the cluster (the first pairing makes a cluster; two fresh
  computers never make two, and one that cannot hear from all of them makes none);
- a crash is restarted after a backoff (1 s doubling to 30 s); a change of the pinned set
  restarts the member (etcd reads its trusted certificates at start); a computer unpaired
  from us is removed from the cluster (`remove_member`); a computer left with no paired
  computer that was in a larger cluster leaves it (`EtcdMember.leave`); a member the cluster
  removed (etcd says so in its log, and that its data must go) is started afresh and asks to
  join again, through the computers still paired with it;
- `fleet_etcd_endpoints` points at an existing cluster instead: no member, a client only;
- every `READ_S` a pass reads every node's shared state (one bounded read) into `nodes`, what
  the views show; a store that answers slowly or not at all changes nothing locally: `why` says
  so and the views carry it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from cadre_desktop.errors import CadreError, InvalidState
from cadre_desktop.host.fleet.computers import Computer, split_address
from cadre_desktop.host.fleet.identity import Identity
from cadre_desktop.host.fleetstate.client import Endpoint, FleetClient
from cadre_desktop.host.fleetstate.datadir import DataState, check_data_dir
from cadre_desktop.host.fleetstate.errors import StoreUnavailable
from cadre_desktop.host.fleetstate.member import EtcdMember, MemberSpec, Peer, etcd_command, heartbeat_for, join_cluster, promote_member
from cadre_desktop.host.fleetstate.shared import PREFIX, NodeShared, SharedState, parse_node
from cadre_desktop.host.fleetstate.tls import FleetTls, certificate_for
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.settings import Settings
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

#: How long a computer left alone tries to take its member out of the cluster (etcd refuses a
#: change for 5 s after its members connect) before it deletes its data anyway.
LEAVE_S = 10.0

CLIENT_OFFSET, PEER_OFFSET = 1, 2
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
#: How often the nodes' shared state is read for the views (a move or arrival reads its node at once).
READ_S = 5.0
NO_CLUSTER = "fleet_no_cluster"
#: How long one pass asks the others to promote this computer's learner (it catches up in well
#: under a second on a home network; the next pass asks again).
PROMOTE_S = 10.0
#: Ask = (computer, method, path, body, timeout) -> (status, doc); the fleet link's client.
Ask = Callable[[Computer, str, str, Any, float], Awaitable[tuple[int, Any]]]


def member_ports(fleet_port: int) -> tuple[int, int]:
    """A computer's etcd client and peer ports, from its fleet link's port."""
    return fleet_port + CLIENT_OFFSET, fleet_port + PEER_OFFSET


def election_for(lease_ms: int) -> int:
    """etcd's election timeout for a fleet lease: a third of it, between 1 and 5 s. etcd grants no
    lease shorter than 1.5 election timeouts, and a leader lost must be replaced well inside a lease."""
    return max(1000, min(5000, lease_ms // 3))


def peer_endpoint(computer: Computer) -> Endpoint:
    host, port = split_address(computer.address)
    return Endpoint(host, member_ports(port)[0])


def parse_endpoints(texts: Sequence[str]) -> list[Endpoint]:
    return [Endpoint(host, int(port)) for host, _, port in (t.rpartition(":") for t in texts)]


def fleet_tls(identity: Identity, host: str, pinned: Sequence[str]) -> FleetTls:
    """The member's and client's TLS: a certificate signed by the computer's own key, trusting the pinned ones."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_private_key(identity.key.encode("ascii"), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise InvalidState("This computer's fleet key is not a P-256 key.")
    own = certificate_for(key, identity.computer_id, [host])
    return FleetTls.of(key, own, [identity.cert.encode(), *(c.encode() for c in pinned)])


class NoCluster(InvalidState):
    """Asked to add a member, this computer has no cluster running (it may be the one to make it)."""

    code = NO_CLUSTER


class FleetStore:
    """The member, the client and the shared state's cache; `state` and `why` for the views."""

    def __init__(self, *, settings: Callable[[], Settings], root: Path, system: Callable[[], ProcessOS],
                 self_id: Callable[[], str], computers: Callable[[], Sequence[Computer]],
                 identity: Callable[[], Awaitable[Identity]], ask: Ask, advertise: Callable[[], str],
                 tick_s: float = 1.0, unpaired_by_them: Callable[[], set[str]] = set) -> None:
        self._settings, self._root, self._system = settings, root, system
        self._self_id, self._computers, self._identity, self._ask = self_id, computers, identity, ask
        self._advertise, self._tick_s, self._unpaired_by_them = advertise, tick_s, unpaired_by_them
        self.state = "off"
        self.why: str | None = "this computer is in no fleet"
        self.member: EtcdMember | None = None
        self.client: FleetClient | None = None
        self.shared: SharedState | None = None
        self.nodes: dict[str, NodeShared] = {}
        self._trust: tuple[str, ...] = ()
        self._endpoints: tuple[Endpoint, ...] = ()
        self._known: set[str] = set()
        self._failures = 0
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._tls: FleetTls | None = None
        self._read_at: float | None = None
        #: The member was started to join a cluster and has not answered yet.
        self._fresh_join = False
        #: The member is known to vote (not a learner still to be promoted) since its start.
        self._voting = False

    # -- life ------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="fleet-store")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close_client()
        if self.member is not None:
            await self.member.stop()
        self.state, self.why = "off", "the host stopped"

    async def _run(self) -> None:
        while True:
            try:
                async with self._lock:
                    await self._step()
                self._failures = 0
                wait = self._tick_s
            except CadreError as exc:
                self._say("unavailable", exc.message)
                wait = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
                self._failures += 1
                log.info("fleet store: %s (next look in %g s)", exc.message, wait)
            await asyncio.sleep(wait)

    def _say(self, state: str, why: str | None) -> None:
        self.state, self.why = state, None if why is None else one_line(why, 300)

    def store(self) -> SharedState:
        """The shared state, or why there is none now (StoreUnavailable, in words)."""
        if self.shared is None or self.state != "ready":
            raise StoreUnavailable(f"the fleet's store is not available: {self.why or 'not started yet'}")
        return self.shared

    # -- one pass ------------------------------------------------------------------

    async def _step(self) -> None:
        computers = list(self._computers())
        configured = self._settings().fleet_etcd_endpoints
        if not computers and not configured:
            await self._alone()
            return
        identity = await self._identity()
        if configured:
            await self._use_client(parse_endpoints(configured), None)
        else:
            await self._keep_member(identity, computers)
        await self._read_nodes()
        self._say("ready", None)

    def _spec(self) -> MemberSpec:
        client_port, peer_port = member_ports(self._settings().fleet_port)
        election_ms = election_for(self._settings().fleet_lease_ms)
        return MemberSpec(name=self._self_id(), host=self._advertise(), client_port=client_port,
                          peer_port=peer_port, root=self._root, election_ms=election_ms,
                          heartbeat_ms=heartbeat_for(election_ms))

    async def _keep_member(self, identity: Identity, computers: list[Computer]) -> None:
        spec = self._spec()
        trust = tuple(sorted(c.cert for c in computers))
        if self.member is not None and (trust != self._trust or not self.member.running):
            if self.member.running:
                log.info("fleet store: the pinned computers changed; the etcd member restarts to trust them")
                await self.member.stop()
            else:
                log.warning("fleet store: the etcd member ended; it is started again")
                if self._fresh_join and not await asyncio.to_thread(_has_log, self.member.spec.data_dir):
                    # A first start on a cluster that ended before it answered (etcd's discovery failed:
                    # a peer restarting meanwhile) leaves a data folder with no log: it joins afresh.
                    log.warning("fleet store: the etcd member ended before it first answered; it joins again")
                    await asyncio.to_thread(shutil.rmtree, self.member.spec.data_dir, True)
                elif await asyncio.to_thread(_was_removed, self.member.spec.log_file):
                    # etcd's own word: its data folder is of no use to any cluster now; it joins afresh.
                    log.warning("fleet store: the cluster removed this computer's member; it asks to join again")
                    await asyncio.to_thread(shutil.rmtree, self.member.spec.data_dir, True)
                self._failures += 1
                await asyncio.sleep(BACKOFF_S[min(self._failures - 1, len(BACKOFF_S) - 1)])
            self.member = None
        if self.member is None:
            self._say("starting", "this computer's etcd member is starting")
            initial = None
            if await asyncio.to_thread(check_data_dir, spec.data_dir) is not DataState.EXISTING:
                initial = await self._join(spec, computers)
                # The join waits on the others (seconds); a computer introduced meanwhile is trusted
                # from the start, or this member would refuse that computer's member until a restart.
                computers = list(self._computers())
                trust = tuple(sorted(c.cert for c in computers))
            tls = self._tls = await asyncio.to_thread(fleet_tls, identity, spec.host, [c.cert for c in computers])
            member = EtcdMember(spec, self._system(), etcd_command(self._settings().etcd_command), tls)
            if initial is None:  # a member on its data (etcd ignores the cluster flags), or a new cluster
                await member.start([Peer(spec.name, spec.peer_url(True))])
            else:
                await member.start(initial, joining=True)
            self.member, self._trust, self._fresh_join = member, trust, initial is not None
            self._voting = False
            await member.wait_ready()
            self._fresh_join = False
        assert self._tls is not None
        await self._ensure_voting(spec, computers)
        await self._use_client([spec.endpoint, *(peer_endpoint(c) for c in computers)], self._tls)
        await self._drop_departed({c.id for c in computers})

    async def _ensure_voting(self, spec: MemberSpec, computers: list[Computer]) -> None:
        """A member that joined as a learner (or restarted as one) is promoted through the others
        once it has caught up; until then this computer's store is not ready (a learner serves no
        reads). Asked once after each start of the member: its own status says whether it votes."""
        if self._voting or self.member is None:
            return
        own = self.member.client(timeout_s=5.0)
        try:
            learner = await own.is_learner()
        finally:
            with contextlib.suppress(StoreUnavailable):
                await own.close()
        if learner:
            others = FleetClient([peer_endpoint(c) for c in computers], self._tls, timeout_s=5.0)
            try:
                await promote_member(others, spec, True, within_s=PROMOTE_S)
            except StoreUnavailable as exc:
                raise StoreUnavailable("this computer's etcd member is catching up with the fleet's cluster"
                                       f" (a learner until the others promote it): {exc.message}") from None
            finally:
                with contextlib.suppress(StoreUnavailable):
                    await others.close()
            log.info("fleet store: this computer's etcd member caught up and votes in the cluster now")
        self._voting = True

    async def _join(self, spec: MemberSpec, computers: list[Computer]) -> list[Peer] | None:
        """Ask each paired computer in turn to add this member: the initial cluster to start with, or
        None when this computer is to make the cluster (every paired computer answered that it has none,
        and this one's id is the smallest: two fresh computers never make two clusters)."""
        said, none_here = [], 0
        for computer in computers:
            try:
                status, doc = await self._ask(computer, "POST", "/fleet/run/etcd/join",
                                              {"peer_url": spec.peer_url(True)}, 30.0)
            except CadreError as exc:
                said.append(f"{computer.name}: {exc.message}")
                continue
            peers = doc.get("initial") if isinstance(doc, dict) else None
            if status == 200 and isinstance(peers, list) and peers:
                return [Peer(str(p["name"]), str(p["peer_url"])) for p in peers[:9] if isinstance(p, dict)]
            error = doc.get("error", {}) if isinstance(doc, dict) else {}
            none_here += error.get("code") == NO_CLUSTER
            said.append(f"{computer.name}: {error.get('message', status)}")
        if none_here == len(computers) and all(self._self_id() < c.id for c in computers):
            log.info("fleet store: no paired computer has a cluster yet; this one makes it")
            return None
        raise StoreUnavailable("this computer's etcd member waits to be added to the fleet's cluster ("
                               + "; ".join(said)[:200] + ")")

    async def join_asked(self, asker: Computer, peer_url: object) -> list[dict[str, str]]:
        """A paired computer asks to be added to the cluster (its member's peer URL); the initial cluster.
        Without a member running here, `NoCluster` (the asker makes one if it is the one to)."""
        host, port = split_address(asker.address)
        if not isinstance(peer_url, str) or peer_url != f"https://{host}:{member_ports(port)[1]}":
            raise InvalidState("A member joins on its own address and peer port only.")
        member = self.member
        if member is None or not member.running:
            raise NoCluster("This computer's etcd member is not running: it has no cluster to add a member to.")
        own = member.client(timeout_s=5.0)
        try:
            joined = MemberSpec(name=asker.id, host=host, client_port=member_ports(port)[0],
                                peer_port=member_ports(port)[1], root=self._root)
            peers = await join_cluster(own, joined, True)
        finally:
            with contextlib.suppress(StoreUnavailable):
                await own.close()
        log.info("fleet store: %s's etcd member was added to the cluster", asker.id)
        return [{"name": p.name, "peer_url": p.peer_url} for p in peers]

    async def _use_client(self, endpoints: Sequence[Endpoint], tls: FleetTls | None) -> None:
        if tuple(endpoints) != self._endpoints or self.client is None:
            await self._close_client()
            self.client = FleetClient(endpoints, tls)
            self.shared = SharedState(self.client)
            self._endpoints = tuple(endpoints)

    async def _close_client(self) -> None:
        client, self.client, self.shared = self.client, None, None
        if client is not None:
            with contextlib.suppress(StoreUnavailable):
                await client.close()

    async def _drop_departed(self, paired: set[str]) -> None:
        """Members of computers this one unpaired leave the cluster (this side removes them; one that
        unpaired itself from us removes ours, and its own is no business of ours)."""
        gone = self._known - paired - {self._self_id()} - self._unpaired_by_them()
        self._known = set(paired)
        if not gone or self.client is None:
            return
        for member in await self.client.members():
            if member.name in gone:
                await self.client.remove_member(member.id)
                log.info("fleet store: the etcd member of %s was removed from the cluster", member.name)

    async def _alone(self) -> None:
        """No paired computer: the member stops; it leaves a cluster it shared (its data is no use then)."""
        member = self.member
        if member is not None:
            shared_with_others = False
            if member.running:
                asker = member.client()
                try:
                    with contextlib.suppress(StoreUnavailable):
                        shared_with_others = len(await asker.members()) > 1
                finally:
                    with contextlib.suppress(StoreUnavailable):
                        await asker.close()
            if shared_with_others:
                await self._leave(member)
            else:
                await member.stop()
                if await asyncio.to_thread(_was_removed, member.spec.log_file):  # removed by the others
                    await asyncio.to_thread(shutil.rmtree, member.spec.data_dir, True)
            self.member = None
            await self._close_client()
        self.nodes = {}
        self._say("off", "this computer is in no fleet")

    async def _leave(self, member: EtcdMember) -> None:
        """Leave the cluster this member shared. The others may refuse it or no longer hear it (they
        unpinned this computer as they unpaired it, and remove its member on their side:
        `_drop_departed`): with no computer paired, its data is of no use to it, so it is stopped and
        its data deleted either way."""
        cluster = member.client(timeout_s=5.0)
        try:
            await member.leave(cluster, within_s=LEAVE_S)
        except CadreError as exc:
            log.info("fleet store: this member could not take itself out of the cluster (%s); the others "
                     "remove it on their side, and its data here is deleted", exc.message)
            await member.stop()
            await asyncio.to_thread(shutil.rmtree, member.spec.data_dir, True)
        finally:
            with contextlib.suppress(StoreUnavailable):
                await cluster.close()

    async def _read_nodes(self) -> None:
        assert self.client is not None
        now = asyncio.get_running_loop().time()
        if self._read_at is not None and now - self._read_at < READ_S and self.state == "ready":
            return
        self._read_at = now
        found = await self.client.get_prefix(PREFIX + b"nodes/")
        ids = {k[len(PREFIX) + 6:].split(b"/", 1)[0].decode("ascii", "replace") for k in found}
        nodes = {}
        for node in ids:
            with contextlib.suppress(CadreError, ValueError):
                nodes[node] = parse_node(node, found)
        self.nodes = nodes

    def read_elsewhere(self, nodes: dict[str, NodeShared]) -> None:
        """Every node's shared state, just read by failover's pass: kept, and the store's own read of
        them waits its `READ_S` from now (one linearizable read per period, not two: each costs a
        Raft round at the leader)."""
        self.nodes = nodes
        self._read_at = asyncio.get_running_loop().time()

    async def refresh(self, node: str) -> NodeShared:
        """One node's shared state read now (bounded), kept for the views."""
        shared = await self.store().read_node(node)
        self.nodes[node] = shared
        return shared

    def view_of(self, node: str) -> dict[str, Any]:
        """What a node view carries of the shared state: its generation, failover, and why unknown."""
        shared = self.nodes.get(node)
        if self.state != "ready":
            return {"generation": shared.generation if shared else None, "failover": bool(shared and shared.failover),
                    "fleet_note": None if self.state == "off" else self.why}
        return {"generation": shared.generation if shared and shared.generation else None,
                "failover": bool(shared and shared.failover), "fleet_note": None}


#: What etcd logs when its member was removed from its cluster (its data folder must then go).
REMOVED_WORDS = "the member has been permanently removed from the cluster"


def _has_log(data_dir: Path) -> bool:
    """Whether a member's data folder holds a write-ahead log with anything in it."""
    wal = data_dir / "member" / "wal"
    return wal.is_dir() and any(w.stat().st_size > 0 for w in wal.glob("*.wal"))


def _was_removed(log_file: Path) -> bool:
    """Whether the member's log ends by saying the cluster removed it (the last 16 KiB read)."""
    try:
        with log_file.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 16384))
            return REMOVED_WORDS.encode() in f.read()
    except OSError:
        return False
