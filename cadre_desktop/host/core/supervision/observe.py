"""What one pass sees of one node: the driver, the probe, the keyring gate, the exit book, the
timeline and the holds, gathered into the `Observation` that `decide()` judges (it reads, never
acts); and the book of each node's last verdict (`DecisionBook`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from cadre_desktop.host.core.clock import Clock, stamp
from cadre_desktop.host.core.driver import DriverStatus, InstanceInfo, NodeDriver
from cadre_desktop.host.core.records.lifecycle import AnyLife, RecordKind, Supervised
from cadre_desktop.host.core.records.records import Hold
from cadre_desktop.host.core.supervision.decide import Decision, Observation, Policy, SecretState, Verdict, starting_words
from cadre_desktop.host.core.supervision.exits import ExitBook
from cadre_desktop.host.core.supervision.gate import StartGate
from cadre_desktop.host.core.supervision.holds import Holds
from cadre_desktop.host.core.supervision.probe import Probe
from cadre_desktop.host.core.timeline import Timeline
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate

log = logging.getLogger(__name__)


class DecisionBook:
    """Per node, the last verdict of a pass (decision, when, how long, error), for views and
    `node show`; and the records a pass skips because they cannot be started again."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.last: dict[str, dict[str, Any]] = {}
        #: Records skipped, each reported once.
        self._skipped: set[str] = set()

    def skip(self, lc: AnyLife, record: Supervised) -> bool:
        """A record that cannot be started again from what it holds is left alone, and said so once."""
        why = lc.kind.cannot_start(record)
        if why is None:
            self._skipped.discard(record.id)
            return False
        if record.id not in self._skipped:
            self._skipped.add(record.id)
            log.warning("%s %s is not supervised: %s", lc.kind.noun, record.id, why)
        self.last[record.id] = {"decision": "skipped", "at": stamp(self.clock), "ms": 0.0, "error": why}
        return True

    def requested_start(self, node_id: str, why: str) -> None:
        """A person started the node (a Retry): that is its last decision now, not the give-up
        the last pass made (which would show until the next pass)."""
        self.last[node_id] = {"decision": Decision.START.value, "at": stamp(self.clock), "ms": 0.0, "error": why}

    def note(self, node_id: str, verdict: Verdict | None, ms: float, error: str | None) -> None:
        self.last[node_id] = {
            "decision": verdict.decision.value if verdict else "error",
            "at": stamp(self.clock),
            "ms": round(ms, 3),
            "error": error or (verdict.reason if verdict else None),
        }


class Observer:
    def __init__(self, *, driver: NodeDriver, gate: KeyringGate, exits: ExitBook, timeline: Timeline,
                 holds: Holds, start_gate: StartGate, probe: Probe | None = None,
                 host_hold: Callable[[Supervised, RecordKind], tuple[Enum, Hold] | None] | None = None) -> None:
        self.driver = driver
        #: Whether one more child may start now (`gate.py`).
        self.start_gate = start_gate
        self.gate = gate
        self.exits = exits
        self.timeline = timeline
        self.holds = holds
        #: Tells whether a child answered (`is_ready`) or stopped answering (`unresponsive`).
        self.probe = probe
        #: The hold the host wants a node to have (host_holds.HostHolds.wanted), when the host has any.
        self.host_hold = host_hold
        #: Why a failover node must not start here now (host/fleetrun/holding.py: `LeaseHold.start_wait`).
        self.lease_wait: Callable[[str], str | None] = _no_wait

    def since_attempt_s(self, record: Supervised) -> float | None:
        if not record.respawn:
            return None
        return self.timeline.since(("attempt", record.id), record.respawn.last_attempt_at)

    def observe(self, record: Supervised, kind: RecordKind, *, uncounted: bool) -> Observation:
        """Everything the decision needs. `uncounted`: its next start spends nothing (a clean quit, a release)."""
        handle = self.driver.get(record.handle)
        status = self.driver.status(record.handle)
        secret = SecretState.READY
        secret_kind = kind.secret_kind(record)
        if self.gate.cached(record.id, secret_kind) is None:
            secret = SecretState.MISSING if self.gate.is_missing(record.id, secret_kind) else SecretState.WAITING
        mark, unresponsive = record.start, False
        # Its start mark spent by this child: it answered (the only word left of a child that ended).
        answered = bool(handle is not None and mark and mark.answered and mark.attempt == getattr(handle, "attempt", -1))
        if status is DriverStatus.RUNNING and handle is not None:
            answered = answered or bool(self.probe and self.probe.is_ready(handle.id))
            unresponsive = bool(self.probe and self.probe.unresponsive(handle.id))
        last_exit = self.exits.words(record.id)
        if last_exit is None and status is not DriverStatus.RUNNING and handle is not None:
            # An exit this process did not see (it died while the host was down): its words
            # come from the log, read once per dead child rather than at every pass.
            last_exit = self.exits.unseen(record.id, handle.id, handle.returncode)
        return Observation(
            status=status,
            returncode=self.exits.code(record.id, handle.returncode if handle else None),
            answered=answered,
            unresponsive=unresponsive,
            started_s=self.started_s(record, handle) if status is DriverStatus.RUNNING else None,
            since_attempt_s=self.since_attempt_s(record),
            secret=secret,
            stopped_cleanly=uncounted,
            last_exit=last_exit,
            node_hold=self.exits.requested(record),
            holdable=kind.holds,
            gate_room=self.start_gate.has_room(),
            wake_in_s=self.holds.wake_in_s(record),
            host_hold=self.host_hold(record, kind) if self.host_hold is not None else None,
            lease_wait=self.lease_wait(record.id) if status is not DriverStatus.RUNNING else None,
            news=self.probe.news(record.handle) if self.probe is not None and status is DriverStatus.RUNNING else None,
            first_answer=bool(status is DriverStatus.RUNNING and handle is not None and self.probe
                              and self.probe.is_ready(handle.id)),
        )

    def next_attempt_at(self, record: Supervised, kind: RecordKind, policy: Policy, now: datetime) -> datetime | None:
        """When the backoff of a down node ends (wall time, for views); None when now or never."""
        if record.status not in kind.supervised or not record.respawn or record.attempts >= policy.max_attempts:
            return None
        since = self.since_attempt_s(record)
        if since is None:
            return None
        remaining = policy.backoff_s(record.attempts) - since
        return now + timedelta(seconds=remaining) if remaining > 0 else None

    def starting(self, record: Supervised, kind: RecordKind, policy: Policy) -> str | None:
        """A start in progress (running, not answered yet) in the seed's words, else None."""
        handle = self.driver.get(record.handle)
        if record.status not in kind.supervised or handle is None or not handle.alive:
            return None
        mark = record.start
        if (self.probe and self.probe.is_ready(handle.id)) or (mark and mark.answered and mark.attempt == handle.attempt):
            return None
        grace = 0.0 if record.problem else policy.grace_s(mark.failures if mark else 0)
        return starting_words(self.started_s(record, handle), grace, mark)

    def started_s(self, record: Supervised, handle: InstanceInfo | None) -> float | None:
        """How long the record's running child has been starting: from its start mark's time, across
        restarts too (seed 003); an unreadable mark gives it no grace; a child no mark names, from
        when this process first saw it."""
        if handle is None or record.problem:
            return None
        mark = record.start
        if mark is not None and mark.attempt == handle.attempt and mark.at:
            return self.timeline.since(("start", record.id), mark.at)
        return self.timeline.seen_for(handle.id)


def _no_wait(_node_id: str) -> str | None:
    return None
