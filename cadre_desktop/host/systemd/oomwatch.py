"""The memory cap's kill on cgroup v1, heard from the kernel.

On cgroup v2 the manager itself says a unit was killed by its memory cap (`Result` is
`oom-kill`). On v1 it cannot: the process just dies of SIGKILL, and its cgroup is gone by
the time the driver hears of the end. So while a capped unit runs, the driver holds the
kernel's own notification for its memory cgroup (an eventfd registered in
`cgroup.event_control` against `memory.oom_control`), which fires when the cap is hit:
a notification, never a poll. Where it cannot be had (v2, no v1 memory hierarchy, no
access) `watch` returns None and the manager's `Result` is all there is.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

V1_MEMORY = Path("/sys/fs/cgroup/memory")


def watch(loop: asyncio.AbstractEventLoop, control_group: str, on_oom: Callable[[], None],
          root: Path = V1_MEMORY) -> Callable[[], None] | None:
    """Call `on_oom` when the memory cgroup `control_group` hits its cap; the function returned stops it."""
    if not control_group or not hasattr(os, "eventfd"):
        return None
    folder = root / control_group.lstrip("/")
    try:
        control = os.open(folder / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    event = -1
    try:
        event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        with open(folder / "cgroup.event_control", "w") as registration:
            registration.write(f"{event} {control}")
    except OSError as exc:
        log.debug("no memory cap notification for %s: %s", control_group, exc)
        for fd in (event, control):
            if fd >= 0:
                os.close(fd)
        return None

    def fired() -> None:
        # The kernel also signals the eventfd once when the cgroup is removed (the unit ended):
        # a count of 2 or more, or 1 while the cgroup is still there, is the cap being hit.
        try:
            count = os.eventfd_read(event)
        except OSError:
            return
        if count >= 2 or _still_there(control):
            on_oom()

    loop.add_reader(event, fired)
    stopped = False

    def stop() -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        loop.remove_reader(event)
        os.close(event)
        os.close(control)
    return stop


def _still_there(control: int) -> bool:
    try:
        os.pread(control, 256, 0)
    except OSError:
        return False
    return True
