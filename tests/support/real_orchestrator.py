"""The real orchestrator over real children (tests/support/sleeper.py), in a test's own folder and ports."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cadre_desktop.host.local.orchestrator import Orchestrator
from cadre_desktop.host.local.ports import PortAllocator
from tests.support import port_blocks
from tests.support.polling import wait_until

SLEEPER = [sys.executable, str(Path(__file__).with_name("sleeper.py"))]


#: Each test home's port range (a second orchestrator of the same home gets the same one).
_RANGES: dict[Path, tuple[int, int]] = {}


def port_range(home: Path) -> tuple[int, int]:
    """100 ports for this home that no other test holds, of this suite or one beside it."""
    if home not in _RANGES:
        low = port_blocks.take(100, 10000, 15000)
        _RANGES[home] = (low, low + 99)
    return _RANGES[home]


def make_orchestrator(home: Path, command=SLEEPER, stop_timeout_s: float = 2.0) -> Orchestrator:
    from cadre_desktop.paths import Paths

    return Orchestrator(
        paths=Paths(home, home, home / "logs"),
        node_command=command,
        ports=PortAllocator(*port_range(home), bind_host="127.0.0.1"),
        bind_host="127.0.0.1",
        advertise_host=lambda: "127.0.0.1",
        stop_timeout_s=stop_timeout_s,
    )


def ready_info(orch: Orchestrator, node_id: str) -> dict:
    path = orch.paths.node_dir(node_id) / "ready.json"
    wait_until(path.exists, what=f"{path}")
    return json.loads(path.read_text())
