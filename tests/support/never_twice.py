"""The checker of "never twice" (issue 36, part 4): every copy of a node polled through rounds of faults.

A `Prober` thread sends `GET /status` (node contract: its body carries "generation") to EVERY
copy of one node, that is every port any computer has listed for it (each host's control API,
`GET /api/nodes`; a port once seen is polled to the end, since copies come and go), and records
each 200 answer's generation with the time it was received (`Ledger`). The violation: once a
copy of generation g+1 has answered, a copy of generation <= g answers again (a node that ran
before failover, generation None, counts as 0).

Faults (`FAULTS`, one per round, in an order drawn from a printed seed: `plan`):

- ``freeze``: SIGSTOP every process of a computer (host, its nodes, its etcd member), until the
  node serves elsewhere (bounded), then SIGCONT: a laptop shut asleep.
- ``kill_host``: kill -9 of a host; the round starts it again.
- ``kill_etcd``: kill -9 of a computer's etcd member (its host supervises it and starts it again).
- ``cut_store``: the computer's etcd member alone is frozen (SIGSTOP) for two leases and more, its
  host and nodes running on: the host's client moves to another member and keeps the lease, so
  the node serves on where it is (the round's 0 s), or, should the lease lapse, elsewhere.
- ``partition``: the computer's network cable pulled (each host in a network namespace of its
  own on one switch, tests/support/netns.py; its veth end down) until the node serves
  elsewhere (bounded), then put back: it runs on, awake, reaching nothing and reached by nothing
  but its own loopback. Only with a home network (root, Linux); the prober then asks every copy
  from the switch, as a device of the home would.
- ``clock_step``: the machine's wall clock stepped by `CLOCK_STEP_S` (CLOCK_REALTIME; the leases
  live on the boot clock and must not care), put back after (the time spent stepped is kept).
  Machine-wide, so root only and bench only: other programs on the machine share the clock.

Every loop here is bounded and every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.node_scan import node_processes

FAULTS = ("freeze", "kill_host", "kill_etcd", "cut_store", "clock_step", "partition")
#: The wall clock's step in the ``clock_step`` fault.
CLOCK_STEP_S = 90.0
#: One request's bound: shorter than any lease, so an answer received late was also sent late.
REQUEST_S = 0.5


@dataclass(frozen=True)
class Answer:
    #: The copy asked: its port on 127.0.0.1, or "address:port" on a home network.
    port: int | str
    generation: int
    sent: float
    received: float


@dataclass(frozen=True)
class Violation:
    newer: Answer
    older: Answer

    def __str__(self) -> str:
        return (f"generation {self.older.generation} answered on port {self.older.port} at {self.older.received:.3f}, "
                f"after generation {self.newer.generation} had answered on port {self.newer.port} at {self.newer.received:.3f}")


@dataclass
class Ledger:
    """Answers as received; `violations` reads them in the order they were received."""
    answers: list[Answer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)

    def snapshot(self) -> list[Answer]:
        with self._lock:
            return sorted(self.answers, key=lambda a: a.received)

    def violations(self) -> list[Violation]:
        found: list[Violation] = []
        first_of: dict[int, Answer] = {}  # generation -> its first answer
        highest: Answer | None = None
        for answer in self.snapshot():
            first_of.setdefault(answer.generation, answer)
            if highest is not None and answer.generation < highest.generation:
                found.append(Violation(newer=first_of[highest.generation], older=answer))
            elif highest is None or answer.generation > highest.generation:
                highest = answer
        return found

    def generations(self) -> list[int]:
        return sorted({a.generation for a in self.snapshot()})


def generation_of(body: bytes, node_id: str | None = None) -> int | None:
    """The generation of a /status body: an int >= 0 (None before failover counts as 0); None if unreadable
    or, with `node_id`, another node's (a freed port taken by some other node on the machine)."""
    try:
        doc = json.loads(body[:65536])
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if node_id is not None and doc.get("node_id") != node_id:
        return None
    value = doc.get("generation")
    if value is None:
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else None


def ask_status(port: int | str, timeout: float = REQUEST_S) -> tuple[int | None, bytes]:
    """One GET /status on 127.0.0.1:port (or on "address:port"): (HTTP status or None when refused/silent, body)."""
    where = f"127.0.0.1:{port}" if isinstance(port, int) else port
    try:
        with urllib.request.urlopen(f"http://{where}/status", timeout=timeout) as reply:
            return reply.status, reply.read(65536)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (OSError, TimeoutError, ValueError):
        return None, b""


def listed_ports(home: Path, node_id: str, timeout: float = 1.0) -> set[int]:
    """The api ports a host lists for its local copy of `node_id` (none when it does not answer)."""
    try:
        ctl = json.loads((home / "control.json").read_text())
        req = urllib.request.Request(ctl["url"] + "/api/nodes", headers={"Authorization": f"Bearer {ctl['token']}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            doc = json.loads(resp.read(2**20))
    except (OSError, TimeoutError, ValueError, KeyError):
        return set()
    return {n["api_port"] for n in doc.get("nodes", [])
            if n.get("id") == node_id and isinstance(n.get("api_port"), int)}


class Prober:
    """A thread polling every copy's /status until `stop` (or `max_s`, whichever is first)."""

    def __init__(self, ports: Callable[[], Iterable[int | str]], ledger: Ledger, *, interval: float = 0.05,
                 discover_every: float = 0.5, max_s: float = 3600.0, node_id: str | None = None,
                 enter: Callable[[], None] | None = None) -> None:
        """`enter`: called first on the prober's own thread (a home network's switch entered)."""
        self.ports_of, self.ledger, self.interval, self.node_id = ports, ledger, interval, node_id
        self.discover_every, self.max_s, self.enter = discover_every, max_s, enter
        self.known: set[int | str] = set()
        self.asked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="never-twice-prober", daemon=True)

    def start(self) -> Prober:
        self.known.update(self.ports_of())
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        if self.enter is not None:
            self.enter()
        end = time.monotonic() + self.max_s
        next_discovery = 0.0
        while not self._stop.is_set() and time.monotonic() < end:
            if time.monotonic() >= next_discovery:
                self.known.update(self.ports_of())
                next_discovery = time.monotonic() + self.discover_every
            for port in sorted(self.known, key=str):
                sent = time.monotonic()
                status, body = ask_status(port)
                self.asked += 1
                if status == 200 and (generation := generation_of(body, self.node_id)) is not None:
                    self.ledger.record(Answer(port, generation, sent, time.monotonic()))
            self._stop.wait(self.interval)


def plan(seed: int, rounds: int, faults: Sequence[str], must: Sequence[str] = ()) -> list[str]:
    """`rounds` faults drawn from `faults` by `seed`; each of `must` at least once (when rounds allow)."""
    rng = random.Random(seed)
    chosen = list(must)[:rounds] + [rng.choice(list(faults)) for _ in range(rounds - min(len(must), rounds))]
    rng.shuffle(chosen)
    return chosen


# -- the faults' machinery ------------------------------------------------------------------------

def processes_of(host_pid: int, home: Path) -> list[psutil.Process]:
    """A computer's processes: its host, everything under it, and its nodes (found by their folder)."""
    root = psutil.Process(host_pid)
    found = {p.pid: p for p in [root, *root.children(recursive=True)]}
    for procs in node_processes(home).values():
        found.update({p.pid: p for p in procs})
    return list(found.values())


def etcd_of(host_pid: int) -> list[psutil.Process]:
    """The host's etcd member (a child process named etcd)."""
    found = []
    for p in psutil.Process(host_pid).children(recursive=True):
        try:
            if "etcd" in p.name():
                found.append(p)
        except psutil.Error:
            pass
    return found


def signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


class ClockStep:
    """The wall clock moved by `step_s` and put back on exit (the time spent stepped kept)."""

    def __init__(self, step_s: float = CLOCK_STEP_S) -> None:
        self.step_s = step_s

    def __enter__(self) -> ClockStep:
        if os.name != "posix" or not hasattr(time, "clock_settime") or os.geteuid() != 0:
            raise PermissionError("a clock step needs root on a POSIX system")
        self._mono, wall = time.monotonic(), time.clock_gettime(time.CLOCK_REALTIME)
        self._wall = wall
        time.clock_settime(time.CLOCK_REALTIME, wall + self.step_s)
        return self

    def __exit__(self, *exc: object) -> None:
        time.clock_settime(time.CLOCK_REALTIME, self._wall + (time.monotonic() - self._mono))


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.2) -> object:
    """The predicate's first truthy value within `timeout`, else None (bounded, never raises by itself)."""
    end = time.monotonic() + timeout
    while True:
        got = predicate()
        if got or time.monotonic() >= end:
            return got or None
        time.sleep(interval)


#: POSIX's numbers where the signal module has none (the faults run on POSIX only).
SIGSTOP: int = int(getattr(signal, "SIGSTOP", 19))
SIGCONT: int = int(getattr(signal, "SIGCONT", 18))
SIGKILL: int = int(getattr(signal, "SIGKILL", 9))
