"""The engine's read model of hosted nodes: one read-only view a node, the same for the UI,
the control API and the CLI.

A view is built fresh at every read from what each part knows now: the record
(status, name, budget), the driver (is a child alive, its pid and ports, even
one the records could not be told of yet), the supervisor (the next attempt,
the last exit, its last verdict), the probe (has it answered) and the claim
secret in memory (for the claim URL). Nothing here writes or decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from cadre_desktop.errors import NoSuchThing
from cadre_desktop.host.core.clock import Clock, iso
from cadre_desktop.host.core.driver import InstanceInfo, NodeDriver
from cadre_desktop.host.core.ops.address import claim_url
from cadre_desktop.host.core.records.lifecycle import Supervised
from cadre_desktop.host.core.records.records import HELD, SUPERVISED, NodeRecord, NodeStatus
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.jsontypes import JSONObject

if TYPE_CHECKING:
    from cadre_desktop.host.core.supervision.probe import Probe
    from cadre_desktop.host.core.supervision.supervisor import Supervisor


class SupervisedView(Protocol):
    """What the views of every supervised kind share (a hosted node's `NodeView`, a lent
    node's `DonationView`): the one shape the front ends read a node's life through.
    Read-only; each view keeps its own field order, which is its JSON's."""

    @property
    def id(self) -> str: ...
    @property
    def running(self) -> bool: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def api_port(self) -> int | None: ...
    @property
    def peer_id(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...
    @property
    def next_retry_at(self) -> str | None: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def last_exit(self) -> str | None: ...
    @property
    def waiting_for(self) -> str | None: ...
    @property
    def last_decision(self) -> JSONObject | None: ...
    @property
    def created_at(self) -> str: ...
    @property
    def updated_at(self) -> str: ...
    @property
    def started_at(self) -> str | None: ...
    @property
    def log_path(self) -> str: ...

    def to_json(self) -> JSONObject: ...


@dataclass(frozen=True)
class NodeView:
    id: str
    name: str
    #: Compare with `NodeStatus` members; the JSON carries its value ("unclaimed", ...).
    status: NodeStatus
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
    last_decision: JSONObject | None = None
    #: While sleeping: when it wakes (ISO-8601 UTC); else None.
    wake_at: str | None = None
    #: While paused, sleeping or done: who holds it ("person", "node", "conditions") and why (one line).
    held_by: str | None = None
    hold_reason: str | None = None
    #: What was wrong with its record as read (an unreadable start mark), else None.
    problem: str | None = None
    #: A start in progress, in words: "starting for 12 s of a 30 s grace (2 failed starts before;
    #: last: exited with code 1: …; started by host:4711)"; None once it answered or while down.
    starting: str | None = None
    #: What it may use and how the OS holds it to that: cpu_percent, memory_mb,
    #: low_priority, enforced, how (host/core/ops/caps.py).
    caps: JSONObject | None = None
    #: Runs whatever the run conditions say (a person's pause still stops it).
    always_run: bool = False
    #: The computer that hosts it (`{"id", "name"}`, the fleet's), None before this computer has a fleet id.
    computer: JSONObject | None = None
    #: The fleet's shared state (host/fleetrun/): its generation (its fencing token; None without
    #: the fleet's store), whether it may fail over, and why the store's word is unknown now.
    generation: int | None = None
    failover: bool = False
    fleet_note: str | None = None

    def __post_init__(self) -> None:
        # A status given by its value ("joined") is taken as the member: typed end to end.
        object.__setattr__(self, "status", NodeStatus(self.status))

    def to_json(self) -> JSONObject:
        doc: JSONObject = asdict(self)
        doc["status"] = self.status.value
        return doc


class NodeViews:
    """Builds the views of one host's nodes from its parts (the Host makes one once they exist)."""

    def __init__(self, *, store: RecordStore, driver: NodeDriver, supervisor: Supervisor, probe: Probe,
                 clock: Clock, address: Callable[[], str],
                 log_path: Callable[[str], Path], claim_secret: Callable[[str], str | None],
                 caps: Callable[[NodeRecord], JSONObject] | None = None,
                 computer: Callable[[], JSONObject | None] = lambda: None,
                 shared: Callable[[str], dict[str, Any]] | None = None) -> None:
        self.store = store
        self.driver = driver
        self.supervisor = supervisor
        self.probe = probe
        #: The node's claim secret if it is in memory (a read never waits for the keyring).
        self.claim_secret = claim_secret
        self.clock = clock
        self.address = address
        self.log_path = log_path
        self.caps = caps
        self.computer = computer  # this computer in the fleet (host/fleet/fleet.py:Fleet.self_ref)
        self.shared = shared  # a node's generation, failover, fleet_note (host/fleetrun/store.py:FleetStore.view_of)

    def list(self) -> list[NodeView]:
        return [self.of(r) for r in self.store.list()]

    def get(self, node_id: str) -> NodeView:
        record = self.store.get(node_id)
        if record is None:
            raise NoSuchThing(f"There is no node {node_id!r} on this host.")
        return self.of(record)

    def of(self, record: NodeRecord) -> NodeView:
        handle = self.driver.get(record.handle)
        unsaved = None if handle and handle.alive else self._unsaved_child(record)
        handle = unsaved or handle
        running = handle is not None and handle.alive
        supervisor = self.supervisor
        return NodeView(
            id=record.id,
            name=record.name,
            status=record.status,
            mode=record.mode.value,
            running=running,
            ready=bool(handle and running and self.probe.is_ready(handle.id)),
            pid=handle.pid if handle and running else None,
            api_port=unsaved.api_port if unsaved else record.api_port,
            p2p_port=unsaved.p2p_port if unsaved else record.p2p_port,
            peer_id=record.peer_id,
            cadre=record.cadre,
            attempts=record.attempts,
            next_retry_at=self._next_retry(record, running),
            last_error=self._save_problem(record, unsaved) or record.error or _backing_off(record, running, supervisor),
            claim_url=self._claim_url(record),
            advertise_host=handle.advertise_host if handle and running and handle.advertise_host else self.address(),
            created_at=record.created_at,
            updated_at=record.updated_at,
            started_at=handle.started_at if handle and running else None,
            log_path=str(self.log_path(record.id)),
            last_exit=last_exit_words(record, running, supervisor),
            exit_code=None if running else supervisor.exit_code(record.id),
            waiting_for="keyring" if supervisor.waiting_for_keyring(record.id) else None,
            last_decision=supervisor.last_decision(record.id),
            **hold_fields(record, supervisor),
            problem=record.problem,
            starting=supervisor.starting(record) if running and not unsaved else None,
            caps=self.caps(record) if self.caps else None,
            always_run=record.always_run,
            computer=self.computer(),
            **(self.shared(record.id) if self.shared is not None else {}),
        )

    def _next_retry(self, record: NodeRecord, running: bool) -> str | None:
        if record.status not in SUPERVISED or running:
            return None
        when = self.supervisor.next_attempt_at(record)
        return iso(when) if when is not None and when > self.clock.now() else None

    def _claim_url(self, record: NodeRecord) -> str | None:
        """Only while unclaimed, and only once its secret is in memory (a read never waits for the keyring)."""
        if record.status is not NodeStatus.UNCLAIMED or not record.api_port:
            return None
        secret = self.claim_secret(record.id)
        return claim_url(self.address(), record.api_port, record.id, secret) if secret else None

    def _unsaved_child(self, record: NodeRecord) -> InstanceInfo | None:
        """A live child of the node that its record does not name: the write after its start failed."""
        if record.status not in SUPERVISED:
            return None
        alive = [h for h in self.driver.handles_for(record.id) if h.alive]
        return alive[-1] if alive else None

    def _save_problem(self, record: NodeRecord, unsaved: InstanceInfo | None) -> str | None:
        """The live truth came from memory, not the records: say why it could not be saved."""
        if unsaved is None and record.id not in self.store.unsaved:
            return None
        why = self.store.save_error or self.driver.save_error
        note = f"running, but not saved yet: {why}" if why else "running, but not saved yet"
        return f"{record.error}; {note}" if record.error else note


class HoldFields(TypedDict):
    """A view's hold fields, as keyword arguments of its dataclass."""

    wake_at: str | None
    held_by: str | None
    hold_reason: str | None


def hold_fields(row: Supervised, supervisor: Supervisor | None) -> HoldFields:
    """A held node's (hosted or lent) `wake_at`, `held_by` and `hold_reason`, for its view."""
    held = {s.value for s in HELD}
    hold = row.hold if row.status.value in held else None
    if hold is None:
        return {"wake_at": None, "held_by": None, "hold_reason": None}
    wake = supervisor.wake_at(row) if row.status.value == NodeStatus.SLEEPING.value and supervisor else None
    return {"wake_at": iso(wake) if wake is not None else None, "held_by": hold.by.value, "hold_reason": hold.reason}


def _backing_off(record: NodeRecord, running: bool, supervisor: Supervisor) -> str | None:
    """A supervised node down after a crash, waiting for its next start: the crash's words are
    its last error (the Reason column, `node list`), not only its details' last exit. A clean
    exit (code 0: a hold it asked for, a quit) is no crash."""
    if running or record.status not in SUPERVISED or supervisor.exit_code(record.id) == 0:
        return None
    return last_exit_words(record, running, supervisor)


def last_exit_words(row: Supervised, running: bool, supervisor: Supervisor | None) -> str | None:
    """What ended the last start of a node (hosted or lent), while it matters: down, or
    starting again after a failure. The supervisor's words for an exit it saw, else the
    start mark's (an exit an earlier host saw)."""
    seen = supervisor.last_exit(row.id) if supervisor else None
    if seen:
        return seen
    mark = row.start
    if mark is not None and mark.last_exit and (not running or not mark.answered):
        return mark.last_exit
    return None
