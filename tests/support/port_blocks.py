"""Port ranges for the tests' hosts that no other test holds, of this suite or of another
running beside it on the same machine (the suite must stay green on a busy machine).

A range is a number of 50-port slots; each slot is an `flock` on a file in the machine's temp
folder, held by the test process until the test ends (`release`, from an autouse fixture in
tests/conftest.py), and taken only when none of its ports has a listener now. A random pick
alone collided: two suites drew the same block, and one found all 50 ports in use.

No slot is taken in the kernel's ephemeral range (the ports it gives client connections): on a
machine where suites run side by side, thousands of their connections sit in TIME_WAIT there (a
client's blocks a bind even with SO_REUSEADDR), and no 100 ports in 44000-48000 were all free.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
from pathlib import Path

from cadre_desktop.host.local.ports import port_is_free

SLOT = 50
LOCKS = Path(tempfile.gettempdir()) / "cadre-desktop-test-ports"
_held: list[int] = []
#: The slot this process holds until it ends, for single ports (`single`), and the next to try.
_kept: list[int] = []
_single = {"start": 0, "next": 0}
#: Whether a test runs now (tests/conftest.py's autouse fixture says so). A range taken outside
#: one (a module's settings made at collection, for a parametrize) is kept until the process
#: ends: given back at the first test's end, another suite took it while this one still used it.
_test = {"running": False}


def take(size: int, low: int, high: int, rng: random.Random | None = None, *, keep: bool = False) -> int:
    """The first port of `size` consecutive ports in [low, high) held for this test alone (with
    `keep`, until this process ends)."""
    slots = -(-size // SLOT)
    eph_low, eph_high = ephemeral_range()
    starts = [s for s in range(low - low % SLOT, high - slots * SLOT, SLOT)
              if s + slots * SLOT <= eph_low or s > eph_high]
    if not starts:
        raise RuntimeError(f"{low}-{high} is all in the ephemeral range {eph_low}-{eph_high}: no test may use it")
    (rng or random).shuffle(starts)
    LOCKS.mkdir(mode=0o700, exist_ok=True)
    for start in starts:
        fds = _lock_slots(start, slots)
        if fds is None:
            continue
        if all(port_is_free("127.0.0.1", port) for port in range(start, start + slots * SLOT)):
            (_kept if keep or not _test["running"] else _held).extend(fds)
            return start
        for fd in fds:
            os.close(fd)
    raise RuntimeError(f"no {size} free ports in {low}-{high}: other tests hold them all")


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The ports the kernel picks for client connections (Linux's default elsewhere)."""
    try:
        low, high = (int(n) for n in path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def _lock_slots(start: int, slots: int) -> list[int] | None:
    fds: list[int] = []
    for n in range(slots):
        fd = os.open(LOCKS / f"{start + n * SLOT}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for held in fds:
                os.close(held)
            return None
        fds.append(fd)
    return fds


def single() -> int:
    """One port no other suite uses (a lend port, a squatter's): from a slot this process holds
    until it ends, free now. A port the OS handed out (bind to 0) could be any other process's
    next ephemeral port, a borrower's connection of a suite beside this one included."""
    if not _single["start"]:
        _single["start"] = take(SLOT, 30000, 32700, keep=True)
    for _ in range(SLOT):
        port = _single["start"] + _single["next"] % SLOT
        _single["next"] += 1
        if port_is_free("127.0.0.1", port):
            return port
    raise RuntimeError(f"every port of {_single['start']}-{_single['start'] + SLOT - 1} is in use")


def test_began() -> None:
    _test["running"] = True


def release() -> None:
    """Give back every slot this test took."""
    _test["running"] = False
    while _held:
        os.close(_held.pop())
