"""The supervisor's decision: (record, what the driver and probe say, now) -> verdict.

Pure on purpose: no store, no driver, no clock. Everything the decision
depends on comes in as an `Observation`, so every rule is a line of a table
and a unit test can pin each one. `Supervisor` carries the verdicts out.

The rule table is `decide()`'s docstring: every rule of supervision, in the order checked.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

from cadre_desktop.host.core.driver import DriverStatus
from cadre_desktop.host.core.records.lifecycle import HOSTED_HOLDS, Supervised
from cadre_desktop.host.core.records.records import HELD, SUPERVISED, Hold, NodeRecord, NodeStatus, StartMark
from cadre_desktop.settings import Settings
from cadre_desktop.wire.exits import ExitCode

#: Node exit codes that mean "respawning will not help" (docs/node-contract.md):
#: bad configuration, an unusable work folder, a corrupt identity or state file.
HOPELESS_EXIT_CODES: dict[int, str] = {ExitCode.CONFIG: "its configuration is wrong",
                                       ExitCode.NODE_DIR: "its work folder is unusable",
                                       ExitCode.CORRUPT_FILE: "its identity or state file is corrupt"}

#: How soon a failover node waiting for this computer's lease is looked at again.
LEASE_LOOK_S = 1.0

_HOSTED_HOLDS: Mapping[str, Enum] = MappingProxyType(dict(HOSTED_HOLDS))


class Decision(str, Enum):
    LEAVE = "leave"
    HEALTHY = "healthy"
    REFILL = "refill"
    STARTING = "starting"
    STALLED = "stalled"
    HUNG = "hung"
    WAIT = "wait"
    WAIT_KEYRING = "waiting-for-keyring"
    WAIT_LEASE = "waiting-for-lease"
    START = "start"
    GIVE_UP = "give-up"
    INVITATION_FAILED = "invitation-failed"
    HOLD = "hold"
    HELD = "held"
    STOP_HELD = "stop-held"
    WAKE = "wake"
    HOST_HOLD = "host-hold"
    HOST_RELEASE = "host-release"
    START_FAILED = "start-failed"
    GATED = "gated"


class SecretState(str, Enum):
    READY = "ready"
    WAITING = "waiting"
    MISSING = "missing"


@dataclass(frozen=True)
class NodeNews:
    """What a hosted node's running child last said of itself on GET /status (the probe's words)."""

    state: str | None
    cadre: str | None = None
    peer_id: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class StartFailure:
    """A start of the node that raised, as `decide()` judges it."""

    #: What the record's error and start mark say of it.
    error: str
    #: The error's own words (what a give-up says after "could not be started: ").
    message: str
    #: The machine is to blame, not the node (it ran out of file descriptors).
    machine: bool = False
    #: Its failure is written in the record already: what is left is whether to give up.
    recorded: bool = False


@dataclass(frozen=True)
class Observation:
    status: DriverStatus
    #: The exit code of the record's child, when it ended and the code is known.
    returncode: int | None = None
    #: The record's current child has answered GET /status (one that ended: its start mark says it had).
    answered: bool = False
    #: It answered once and has been silent longer than the probe allows since.
    unresponsive: bool = False
    #: Seconds since the record's current child was started (None: unknown).
    started_s: float | None = None
    #: Seconds since the last counted attempt (None: none, or unknown).
    since_attempt_s: float | None = None
    secret: SecretState = SecretState.READY
    #: The last host stopped this node on a clean quit.
    stopped_cleanly: bool = False
    #: Words for the last exit seen ("exited with code 3: ...", "never answered within 15 s").
    last_exit: str | None = None
    #: What the node's run.json asked for at its last exit (code 0): (the state's name, hold), else None.
    node_hold: tuple[str, Hold] | None = None
    #: The hold statuses of this kind of node by the state's name (empty: it is never held).
    holdable: Mapping[str, Enum] = dataclasses.field(default_factory=lambda: _HOSTED_HOLDS)
    #: A start that raised (the pass's own start, or a person's).
    start_failure: StartFailure | None = None
    #: The start gate has room for one more starting child.
    gate_room: bool = True
    #: What the current child last said of itself (hosted nodes; None: nothing, or not this kind's).
    news: NodeNews | None = None
    #: The current child answered, and the start mark is not spent yet.
    first_answer: bool = False
    #: For a sleeping node: seconds until its wake_at (None: no end).
    wake_in_s: float | None = None
    #: The hold the host wants the node to have now (Pause all, a run condition): (status, hold), else None.
    host_hold: tuple[Enum, Hold] | None = None
    #: A fleet's failover node that this computer holds under no valid lease now: why it must not start.
    lease_wait: str | None = None


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    #: For START: whether it spends an attempt.
    counted: bool = True
    #: For GIVE_UP, STALLED, HUNG: the words the record and the user get.
    reason: str | None = None
    #: For WAIT, STARTING and HELD: seconds until the next look is due.
    due_in_s: float | None = None
    #: For HOLD: the status and hold the node asked for; for HOST_HOLD, the host's.
    hold: tuple[Enum, Hold] | None = None
    #: What the node said of itself that its record does not hold yet: written before the
    #: decision is carried out (the change, and the record's fields it sets).
    news: tuple[str, dict[str, Any]] | None = None
    #: A hold the node asked for that its kind cannot have (the state's name): said, then dropped.
    refused_hold: str | None = None


class Policy:
    """The numbers of supervision, from settings."""

    def __init__(self, settings: Settings) -> None:
        self.base_ms = settings.respawn_backoff_base_ms
        self.max_ms = settings.respawn_backoff_max_ms
        self.max_attempts = settings.respawn_max_attempts
        self.healthy_ms = settings.respawn_healthy_ms
        self.sweep_s = settings.sweep_ms / 1000
        self.grace_ms = settings.start_grace_ms
        self.grace_max_ms = settings.start_grace_max_ms

    def backoff_s(self, attempts: int) -> float:
        """No attempt yet: at once. After n attempts: base * 2^n, capped."""
        if attempts <= 0:
            return 0.0
        return float(min(self.base_ms * (2 ** min(attempts, 40)), self.max_ms)) / 1000

    def grace_s(self, failures: int) -> float:
        """The start grace after `failures` failed starts: the base doubled per failure, capped (0: off)."""
        if self.grace_ms <= 0:
            return 0.0
        return float(min(self.grace_ms * (2 ** min(max(failures, 0), 40)), max(self.grace_max_ms, self.grace_ms))) / 1000


def seconds(s: float) -> str:
    """A duration in words a person reads at a glance."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def starting_words(since_s: float | None, grace_s: float, mark: StartMark | None) -> str:
    """A start in progress in the seed's words: "starting for 12 s of a 30 s grace (2 failed
    starts before; last: exited with code 1: …; started by host:4711)"."""
    words = "starting" if since_s is None else f"starting for {seconds(since_s)}"
    if grace_s > 0:
        words += f" of a {seconds(grace_s)} grace" if since_s is not None else f" (a {seconds(grace_s)} grace)"
    notes = []
    if mark is not None and mark.failures:
        notes.append(f"{mark.failures} failed start{'s' if mark.failures != 1 else ''} before")
    if mark is not None and mark.last_exit and mark.failures:
        notes.append(f"last: {mark.last_exit}")
    if mark is not None and mark.by:
        notes.append(f"started by {mark.by}")
    return f"{words} ({'; '.join(notes)})" if notes else words


def exit_words(code: int | None, last_line: str | None) -> str:
    """What a person is told of an exit: the code or signal, and the node's own last line."""
    if code is None:
        words = "exited"
    elif code < 0:
        try:
            words = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            words = f"was killed by signal {-code}"
    else:
        words = f"exited with code {code}"
    if last_line:
        words += f": {last_line}"
    return words


def decide(record: Supervised, obs: Observation, policy: Policy, supervised: frozenset[Enum] = SUPERVISED,
           held: frozenset[Enum] = HELD) -> Verdict:
    """Every rule of supervision, as one table. `supervised`: the statuses of this kind of record that
    are kept running (lent nodes have theirs); `held`: its hold statuses (paused, sleeping, done; a kind
    without holds has none).

    The rules, in the order they are checked:
      a start raised, its failure not written -> START_FAILED (its mark says why; counted, unless the
                                                machine is to blame: a descriptor shortage spends nothing)
      a start raised, written, attempts spent -> GIVE_UP ("could not be started: ...")
      a start raised, written                -> LEAVE (the failure is the pass's error; its backoff comes)
      held by the host, the host wants none  -> HOST_RELEASE (Pause all or its condition ended: started, uncounted)
      held by the host, it wants another     -> HOST_HOLD (the new hold written: another reason, or an end)
      held by the host, as it wants, child up-> STOP_HELD; else HELD (its release comes from the host, not wake_at)
      held (paused, sleeping, done), child up -> STOP_HELD (its hold stops it; nothing counted)
      sleeping, its wake_at reached          -> WAKE (started again, uncounted, budget untouched), or
                                                HOST_HOLD when the host holds every node now
      held                                   -> HELD (sleeping: a look is due at wake_at)
      not supervised, or no child yet        -> LEAVE (the code creating it owns it)
      the host wants it held                 -> HOST_HOLD (Pause all, or a run condition: stopped, nothing counted)
      running: what the node said of itself that its record lacks is written first, whatever the
               verdict (its first answer spends the start mark; `joined` with its cadre; a new peer id)
      running, joining, invitation failed    -> INVITATION_FAILED (error with its words, then stopped)
      running, answered, stopped answering   -> HUNG (stop it; the crash path counts it)
      running, not answered, past its grace  -> STALLED (a failed start: stop it)
      running, not answered, inside grace    -> STARTING (nothing kills or restarts it)
      running, attempts old enough           -> REFILL (the budget is full again)
      running                                -> HEALTHY
      down, exit 0 with a run.json hold      -> HOLD (paused, sleeping or done, as the node asked), when
                                                its kind can be held so; else the rules below, the request
                                                refused (`refused_hold`: said once, then dropped)
      down, a failover node this computer
            holds under no valid lease now   -> WAIT_LEASE (nothing started, nothing counted: another
                                                computer may hold it; a look is due in LEASE_LOOK_S)
      down, stopped cleanly by the last host -> START, uncounted, whatever budget or backoff said (the
                                                secret and gate rules below still apply)
      down, exit 6 after it had answered     -> START, uncounted (it served, then stopped at its lease's
                                                deadline: no crash); exit 6 unanswered counts, as below
      down, an exit retrying cannot fix      -> GIVE_UP at once, with the node's own words
      down, budget spent                     -> GIVE_UP
      down, inside backoff                   -> WAIT
      down, secret not in memory yet         -> WAIT_KEYRING (no attempt counted)
      down, secret absent from the keyring   -> GIVE_UP
      down, the start gate full              -> GATED (left as it is: nothing written or spent; a freed
                                                slot brings the pass that starts it)
      down                                   -> START (counts one attempt)
    """
    if obs.start_failure is not None:
        return _start_failed(record, obs.start_failure, policy)
    if record.status in held:
        if record.hold is not None and record.hold.scope == "host":
            return _held_by_host(record, obs)
        return _held(record, obs)
    if record.status not in supervised or not record.handle:
        return Verdict(Decision.LEAVE)
    if obs.host_hold is not None:
        return Verdict(Decision.HOST_HOLD, hold=obs.host_hold, reason=obs.host_hold[1].reason)
    if obs.status is DriverStatus.RUNNING:
        return _running(record, obs, policy)
    return _down(record, obs, policy)


def _running(record: Supervised, obs: Observation, policy: Policy) -> Verdict:
    verdict = _running_rules(record, obs, policy)
    news = _news(record, obs)
    return dataclasses.replace(verdict, news=news) if news is not None else verdict


def _news(record: Supervised, obs: Observation) -> tuple[str, dict[str, Any]] | None:
    """The node's own word taken into its record: its first answer spends the start mark; a
    claim makes it joined with its cadre; a new peer id is kept. (change, fields) or None."""
    change: str | None = None
    fields: dict[str, Any] = {}
    if obs.first_answer and record.start is not None and not record.start.answered:
        change, fields["start"] = "answered", dataclasses.replace(record.start, answered=True)
    news = obs.news
    if news is not None and isinstance(record, NodeRecord):  # the probe has news of hosted nodes only
        peer = news.peer_id or record.peer_id
        if news.state == "joined" and (record.status is not NodeStatus.JOINED or record.cadre != news.cadre):
            change = "joined"
            fields.update(status=NodeStatus.JOINED, cadre=news.cadre, peer_id=peer, error=None)
        elif peer != record.peer_id:
            change, fields["peer_id"] = change or "peer", peer
    return (change, fields) if change else None


def _running_rules(record: Supervised, obs: Observation, policy: Policy) -> Verdict:
    if obs.news and obs.news.state == "failed" and record.status is NodeStatus.JOINING:
        return Verdict(Decision.INVITATION_FAILED, reason=f"invitation failed: {obs.news.error or 'no reason given'}")
    if obs.answered and obs.unresponsive:
        return Verdict(Decision.HUNG, reason="stopped answering its status requests")
    if not obs.answered:
        grace = policy.grace_s(record.start.failures if record.start else 0)
        if grace > 0 and obs.started_s is not None:
            if obs.started_s >= grace:
                return Verdict(Decision.STALLED, reason=f"never answered within {seconds(grace)}")
            return Verdict(Decision.STARTING, due_in_s=grace - obs.started_s)
    if (record.attempts > 0 and obs.since_attempt_s is not None
            and obs.since_attempt_s * 1000 > policy.healthy_ms):
        return Verdict(Decision.REFILL)
    return Verdict(Decision.HEALTHY)


def _held(record: Supervised, obs: Observation) -> Verdict:
    """A held node is never started; a child of it still up is stopped; a sleeper wakes at its time."""
    if obs.status is DriverStatus.RUNNING:
        return Verdict(Decision.STOP_HELD, reason=f"it is {record.status}")
    if record.status.value == NodeStatus.SLEEPING.value and obs.wake_in_s is not None:  # any kind's sleeping
        if obs.wake_in_s <= 0:
            if obs.host_hold is not None:  # it wakes into the host's hold: no start only to be stopped
                return Verdict(Decision.HOST_HOLD, hold=obs.host_hold, reason=obs.host_hold[1].reason)
            return Verdict(Decision.WAKE, counted=False)
        return Verdict(Decision.HELD, due_in_s=obs.wake_in_s)
    return Verdict(Decision.HELD)


def _held_by_host(record: Supervised, obs: Observation) -> Verdict:
    """A node the host holds: released when the host wants it held no more, its hold replaced when
    the host wants another; its own wake_at is only words (the host's timers end it)."""
    wanted = obs.host_hold
    if wanted is None:
        return Verdict(Decision.HOST_RELEASE, counted=False)
    status, hold = wanted
    if record.hold is None or status.value != record.status.value or not hold.same_as(record.hold):
        return Verdict(Decision.HOST_HOLD, hold=wanted, reason=hold.reason)
    if obs.status is DriverStatus.RUNNING:
        return Verdict(Decision.STOP_HELD, reason=f"it is {record.status}")
    return Verdict(Decision.HELD)


def _start_failed(record: Supervised, failure: StartFailure, policy: Policy) -> Verdict:
    if not failure.recorded:
        return Verdict(Decision.START_FAILED, counted=not failure.machine, reason=failure.error)
    if record.attempts >= policy.max_attempts:
        return Verdict(Decision.GIVE_UP, reason=f"could not be started: {failure.message}")
    return Verdict(Decision.LEAVE, reason=failure.message)


def _down(record: Supervised, obs: Observation, policy: Policy) -> Verdict:
    if obs.node_hold is not None:
        state, hold = obs.node_hold
        status = obs.holdable.get(state)
        if status is not None:
            return Verdict(Decision.HOLD, hold=(status, hold))
        return dataclasses.replace(_down(record, dataclasses.replace(obs, node_hold=None), policy),
                                   refused_hold=state)
    if obs.lease_wait is not None:
        return Verdict(Decision.WAIT_LEASE, counted=False, reason=obs.lease_wait, due_in_s=LEASE_LOOK_S)
    if obs.stopped_cleanly or (obs.returncode == ExitCode.LEASE_EXPIRED and obs.answered):
        return _start_if_secret(obs, counted=False)
    if obs.returncode in HOPELESS_EXIT_CODES:
        why = HOPELESS_EXIT_CODES[obs.returncode]
        return Verdict(Decision.GIVE_UP, reason=f"{obs.last_exit or f'exited with code {obs.returncode}'} "
                                               f"({why}; restarting it will not help)")
    if record.attempts >= policy.max_attempts:
        return Verdict(Decision.GIVE_UP, reason=obs.last_exit or "the node did not stay running")
    wait = policy.backoff_s(record.attempts)
    if obs.since_attempt_s is not None and obs.since_attempt_s < wait:
        return Verdict(Decision.WAIT, due_in_s=wait - obs.since_attempt_s)
    return _start_if_secret(obs, counted=True)


def _start_if_secret(obs: Observation, *, counted: bool) -> Verdict:
    if obs.secret is SecretState.WAITING:
        return Verdict(Decision.WAIT_KEYRING, counted=counted)
    if obs.secret is SecretState.MISSING:
        return Verdict(Decision.GIVE_UP, reason="its secret is missing from the keyring, so it cannot be started; "
                                                "remove the node and add it again")
    if not obs.gate_room:
        return Verdict(Decision.GATED, counted=counted)
    return Verdict(Decision.START, counted=counted)
