"""A node's lease deadline, as host and node share it (node contract: "Never twice").

A node of a fleet may be started with a generation (its fencing token, `CADRE_GENERATION`)
and a lease deadline (`CADRE_LEASE_DEADLINE`): an instant in nanoseconds on the *boot
clock*, the one clock that keeps counting while the computer is suspended. Past it the node
stops serving by itself, before its host has run a line after a wake, because by then
another computer may have taken the node over. While the host renews its lease it moves the
deadline on by writing `lease.json` in the node's work folder (`LEASE_FILE`, this module's
format, written whole and atomically); the node reads it when its deadline comes.

Why a boot clock and not the monotonic one: Linux's CLOCK_MONOTONIC stops during a suspend,
so a deadline on it would still lie ahead after a night asleep. CLOCK_BOOTTIME does not stop.
macOS's CLOCK_MONOTONIC already counts sleep; on Windows `time.monotonic` is the performance
counter, which counts it too. Host and node call the same `boot_ns()`, so both sides of the
contract measure on one clock of one machine.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cadre_desktop.errors import Invalid

GENERATION_VAR = "CADRE_GENERATION"
DEADLINE_VAR = "CADRE_LEASE_DEADLINE"
#: The file in the node's work folder by which the host moves the deadline on.
LEASE_FILE = "lease.json"
LEASE_FILE_VERSION = 1
#: A lease file is a few dozen bytes; a larger one is refused unread.
MAX_LEASE_FILE = 512
#: Generations are positive and fit in a signed 63 bits (etcd stores them as text).
MAX_GENERATION = 2**63 - 1


def boot_ns() -> int:
    """Now on the clock that keeps counting while the computer sleeps (nanoseconds)."""
    if sys.platform.startswith("linux"):
        return time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    if sys.platform == "darwin":
        return time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return time.monotonic_ns()


@dataclass(frozen=True)
class LeaseTerms:
    """The generation a node runs at and the instant (boot clock, ns) it must stop serving by."""

    generation: int
    deadline_ns: int

    def expired(self, now_ns: int) -> bool:
        return now_ns >= self.deadline_ns


def _number(text: object, name: str, low: int) -> int:
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise Invalid(f"{name} must be a whole number")
    if isinstance(text, str):
        text = text.strip()
        if not text.isdigit() or len(text) > 20:
            raise Invalid(f"{name} must be a whole number of at most 20 digits")
        text = int(text)
    if not low <= text <= MAX_GENERATION:
        raise Invalid(f"{name} must be between {low} and {MAX_GENERATION}")
    return text


def terms_from_env(env: Mapping[str, str]) -> LeaseTerms | None:
    """The lease a node was started with, or None (a node outside a fleet's failover). Both
    variables or neither: a generation without a deadline is a mistake, never "forever"."""
    generation = env.get(GENERATION_VAR, "").strip()
    deadline = env.get(DEADLINE_VAR, "").strip()
    if not generation and not deadline:
        return None
    if not generation or not deadline:
        raise Invalid(f"set both {GENERATION_VAR} and {DEADLINE_VAR}, or neither")
    return LeaseTerms(_number(generation, GENERATION_VAR, 1), _number(deadline, DEADLINE_VAR, 0))


def env_of(terms: LeaseTerms) -> dict[str, str]:
    """The variables a host starts a node with for `terms`."""
    return {GENERATION_VAR: str(terms.generation), DEADLINE_VAR: str(terms.deadline_ns)}


def render(terms: LeaseTerms) -> bytes:
    """`lease.json` for `terms` (not a secret: a generation and an instant)."""
    doc = {"version": LEASE_FILE_VERSION, "generation": terms.generation, "deadline_ns": terms.deadline_ns}
    return json.dumps(doc).encode()


def parse(data: bytes) -> LeaseTerms:
    """`lease.json`, hostile until checked: Invalid for anything but this format's version 1."""
    if len(data) > MAX_LEASE_FILE:
        raise Invalid(f"{LEASE_FILE} is over {MAX_LEASE_FILE} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise Invalid(f"{LEASE_FILE} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("version") != LEASE_FILE_VERSION:
        raise Invalid(f"{LEASE_FILE} is not version {LEASE_FILE_VERSION} of its format")
    return LeaseTerms(_number(doc.get("generation"), "generation", 1), _number(doc.get("deadline_ns"), "deadline_ns", 0))


def read(node_dir: Path) -> LeaseTerms | None:
    """The node's `lease.json` in `node_dir`, checked (`parse`); None when there is none. Raises
    Invalid for a damaged one and OSError for one that cannot be read (a blocking read of a tiny file)."""
    try:
        with (node_dir / LEASE_FILE).open("rb") as f:
            return parse(f.read(MAX_LEASE_FILE + 1))
    except FileNotFoundError:
        return None
