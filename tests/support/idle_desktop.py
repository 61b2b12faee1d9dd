"""What the in-use condition reads, for real: a bare Xvfb (its MIT-SCREEN-SAVER extension keeps
the idle time) moved by `xdotool`, and a fake GNOME idle monitor (`org.gnome.Mutter.IdleMonitor`)
served with dbus-fast on a bus of the test's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method

from tests.support.processes import end


@contextmanager
def bare_xvfb(*extra: str) -> Iterator[str]:
    """An Xvfb with nothing on it; yields its DISPLAY, stopped at the end. `-noreset`: with no client
    kept connected (the source opens the display for each question), a server that resets after
    its last client refuses the next one for a moment; a desktop always has clients. `extra`:
    more of Xvfb's arguments (`-auth FILE`)."""
    for tool in ("Xvfb", "xdotool"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is missing; ./scripts/test installs it (xvfb, xdotool)")
    read, write = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "640x480x24", "-nolisten", "tcp",
                             "-noreset", *extra],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        with os.fdopen(read) as fh:
            number = fh.readline().strip()
        if not number:
            raise RuntimeError("Xvfb did not start")
        yield f":{number}"
    finally:
        end(proc)


def move_pointer(display: str, x: int, y: int) -> None:
    """Input as a person gives it: a pointer move through XTest."""
    subprocess.run(["xdotool", "mousemove", str(x), str(y)], env={**os.environ, "DISPLAY": display}, check=True,
                   timeout=10)


def GetIdletime(self: FakeIdleMonitor) -> int:
    return self.idle_ms


GetIdletime.__annotations__ = {"return": "t"}


class FakeIdleMonitor(ServiceInterface):
    def __init__(self, idle_ms: int) -> None:
        super().__init__("org.gnome.Mutter.IdleMonitor")
        self.idle_ms = idle_ms

    GetIdletime = method(name="GetIdletime")(GetIdletime)


async def serve_idle_monitor(address: str, idle_ms: int) -> tuple[MessageBus, FakeIdleMonitor]:
    bus = await MessageBus(bus_address=address).connect()
    monitor = FakeIdleMonitor(idle_ms)
    bus.export("/org/gnome/Mutter/IdleMonitor/Core", monitor)
    await bus.request_name("org.gnome.Mutter.IdleMonitor")
    return bus, monitor
