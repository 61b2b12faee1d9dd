"""The start gate: how many children may be booting at once.

A storm (half the nodes killed together) used to restart every node in one
pass. Fifty interpreters booting together on two cores fill the run queue, and
the host's own loop waits its turn behind them: the loop's lag is run-queue
wait, not work of ours. Their priority cannot be lowered further while they
boot (an unprivileged process cannot raise it back), so the pass paces them.

A child counts as *starting* from its start until the probe has had its first
answer, it is no longer running, or `BOUND_S` has passed. A pass asks before a
start it decided (`has_room`); when the gate is full it leaves the node as it
is (nothing written, no attempt, no backoff) and the next pass starts it. The
gate never waits: a pass that awaited a slot would hold the serial queue, and a
person's Retry behind it. A person's start (add, Retry, Restart, Resume) does
not ask; it only counts, so the storm paces around it.

A child forked from a loaded node program (warm starts on Linux: `host/local/forks.py`)
holds no slot: it loads nothing, and fifty of them took 0.1-0.2 s of CPU in all to answer
(`bench/storm_peers.py`), so pacing them would only make the storm last longer.

A freed slot kicks one pass (coalesced, like exits) only when a pass left a
node waiting; a single crash finds the gate empty and starts in its own pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: At most this many children starting at once, whatever the machine.
LIMIT_CAP = 16

#: A start silent this long no longer holds a slot. A node with a core's share answers in well
#: under a second; one still silent after this is hung or waits on something other than the CPU
#: (the network, a disk), so holding its slot protects nothing and would stall the storm behind
#: it. The start grace (15 s by default) is the node's verdict, and far too long for pacing.
BOUND_S = 5.0


def machine_limit(cpus: int | None = None) -> int:
    """Three starting children a core, capped. A few low-priority boots a core leave the host's loop
    its turn at once (fifty on two cores did not). Not fewer: a slot frees only when the probe sees
    the first answer, and a new child is asked every 250 ms, so a slot turns over about four times a
    second. Three a core (a boot's ~80 ms of CPU, three sharing a core, answer inside one probe
    period) keep up with the pass's own spawns (30-60 ms each); by that count, two a core would
    stretch the healing of fifty on two cores to about 3 s (`bench/` measures it)."""
    n = cpus if cpus is not None else (os.cpu_count() or 1)
    return min(LIMIT_CAP, 3 * max(1, n))


class StartGate:
    """The children starting now (by handle id, with when each started), and whether a pass left a node
    for want of room. Synchronous throughout: nothing here is awaited."""

    def __init__(
        self,
        *,
        limit: int,
        monotonic: Callable[[], float],
        is_ready: Callable[[str], bool],
        is_running: Callable[[str], bool],
        kick: Callable[[], None],
        bound_s: float = BOUND_S,
    ) -> None:
        self.limit = max(1, limit)
        self.bound_s = bound_s
        self._monotonic = monotonic
        self._is_ready = is_ready
        self._is_running = is_running
        #: Asks for a pass; coalesced by the caller (`PassSchedule.after_exit`).
        self._kick = kick
        self._starting: dict[str, float] = {}
        #: A pass left a node since the last kick: a freed slot must bring a pass.
        self._waiting = False

    def started(self, handle_id: str) -> None:
        """A child was started (by a pass or a person): it holds a slot until it is done starting."""
        self._starting[handle_id] = self._monotonic()

    def starting(self) -> list[str]:
        """The children still starting (those done starting are dropped here)."""
        now = self._monotonic()
        done = [h for h, at in self._starting.items()
                if now - at >= self.bound_s or self._is_ready(h) or not self._is_running(h)]
        for handle_id in done:
            del self._starting[handle_id]
        return list(self._starting)

    def has_room(self) -> bool:
        return len(self.starting()) < self.limit

    def pass_began(self) -> None:
        """A pass looks at every node again: only the nodes it leaves need a kick later."""
        self._waiting = False

    def leave(self) -> None:
        """A pass left a node it would have started: the next freed slot brings a pass."""
        self._waiting = True

    def answered(self, handle_id: str) -> None:
        """The probe had a child's first answer: its slot is free (a pass comes, if one is wanted)."""
        if self._starting.pop(handle_id, None) is not None:
            self._freed()

    def until_free(self) -> float | None:
        """While a node waits: seconds until the oldest start passes the bound (a timer brings the pass
        then, as nothing else tells of it); else None."""
        if not self._waiting:
            return None
        starting = self.starting()
        if not starting:
            return 0.0
        oldest = min(self._starting[h] for h in starting)
        return max(0.0, oldest + self.bound_s - self._monotonic())

    def _freed(self) -> None:
        if self._waiting:
            self._waiting = False  # the pass it brings leaves the node again if the gate is full again
            self._kick()
