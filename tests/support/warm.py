"""Warm starts under test: an orchestrator with standbys on, and what its tests look at."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request

import psutil

from cadre_desktop.host.local.orchestrator import Orchestrator
from cadre_desktop.host.local.ports import PortAllocator
from tests.support.polling import async_wait_until
from tests.support.real_orchestrator import port_range

REFERENCE = [sys.executable, "-m", "cadre_desktop.node"]


def make(home, command=REFERENCE) -> Orchestrator:
    from cadre_desktop.paths import Paths

    return Orchestrator(
        paths=Paths(home, home, home / "logs"), node_command=command,
        ports=PortAllocator(*port_range(home), bind_host="127.0.0.1"), bind_host="127.0.0.1",
        advertise_host=lambda: "127.0.0.1", stop_timeout_s=2.0, warm_standby=True,
    )


def status(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=1) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def ready_standby(orch, other_than: int | None = None) -> int:
    await async_wait_until(lambda: orch.standby.ready is not None and orch.standby.ready.popen.pid != other_than,
                           timeout=15, what="a standby")
    return orch.standby.ready.popen.pid


def program(tmp_path, name: str, standby_body: str = "") -> list[str]:
    """A real node program of its own file: the reference node, with `standby_body` run first in standby."""
    script = tmp_path / f"{name}.py"
    script.write_text(
        "import os, runpy, sys, time\n"
        "if os.environ.get('CADRE_STANDBY') == '1':\n"
        + (standby_body or "    from cadre_desktop.node import __main__ as m\n"
                            "    if not m._stand_by():\n        sys.exit(0)\n")
        + "runpy.run_module('cadre_desktop.node', run_name='__main__', alter_sys=True)\n")
    return [sys.executable, str(script)]


def hanging(tmp_path, name: str, says: bytes) -> list[str]:
    """A node program whose standby says `says` (`ready` or `ready fork`), reads one request, then hangs."""
    word = repr(says + b"\n")
    return program(tmp_path, name, f"    os.write(0, {word})\n    sys.stdin.buffer.readline()\n    time.sleep(3600)\n")


def cmdline(pid: int) -> str:
    return " ".join(psutil.Process(pid).cmdline())


def close_and_end(orch) -> None:
    """A test's orchestrator closed, and the nodes it leaves running by design killed (their groups)."""
    orch.close()
    for handle in orch.list_nodes():
        try:
            os.killpg(handle.pid, signal.SIGKILL)
        except OSError:
            pass
