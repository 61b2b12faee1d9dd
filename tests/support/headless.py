"""Run the real headless host in a subprocess and talk to its control API."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support import port_blocks
from tests.support.polling import wait_until

if TYPE_CHECKING:
    from tests.support.netns import HomeNetwork

REPO = Path(__file__).resolve().parents[2]
FLAKY_NODE = [sys.executable, str(REPO / "tests" / "support" / "flaky_node.py")]


def fast_settings(**overrides) -> dict:
    low = port_blocks.take(50, 20000, 30000)
    settings = {
        "bind_host": "127.0.0.1",
        "advertise_host": "127.0.0.1",
        "port_range": [low, low + 49],
        "respawn_backoff_base_ms": 50,
        "respawn_backoff_max_ms": 1000,
        "respawn_max_attempts": 3,
        "sweep_ms": 1000,
        "probe_interval_ms": 200,
        "stop_timeout_ms": 3000,
        "warm_standby": False,
        # Nodes at normal priority: on a machine busy with other suites, nice 10 would starve
        # them past the tests' deadlines (tests/integration/test_caps_headless.py checks it).
        "node_low_priority": False,
    }
    settings.update(overrides)
    return settings


def host_settings(rng: random.Random, **overrides) -> dict:
    """Quick supervision, loopback only, a port range of its own, the flaky node.

    Ports come from 61000-65499: above the kernel's usual ephemeral range and
    away from the 20000-32000 the other tests and the benchmarks draw from, so
    suites running side by side on one machine do not starve each other.
    """
    low = port_blocks.take(100, 61000, 65400, rng)
    settings = {
        "bind_host": "127.0.0.1",
        "advertise_host": "127.0.0.1",
        "port_range": [low, low + 99],
        "node_command": FLAKY_NODE,
        "respawn_backoff_base_ms": 50,
        "respawn_backoff_max_ms": 400,
        "respawn_max_attempts": 3,
        "sweep_ms": 500,
        "probe_interval_ms": 200,
        "stop_timeout_ms": 3000,
        "node_low_priority": False,  # as in fast_settings
    }
    settings.update(overrides)
    return settings


def added(host: HeadlessHost, name="Kitchen") -> dict:
    status, body = host.api("POST", "/api/nodes", {"name": name})
    assert status == 201, body
    return body


def running_node(host: HeadlessHost, node_id: str, not_pid=None) -> dict:
    def check():
        n = host.node(node_id)
        return n if n["ready"] and n["pid"] != not_pid else None
    return wait_until(check, timeout=20, what=f"node {node_id} running")


def control_request(home: Path, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One call to the control API of the host running for `home`, with its token."""
    ctl = json.loads((home / "control.json").read_text())
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(ctl["url"] + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {ctl['token']}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def control_get(home: Path, path: str) -> dict:
    """GET on the control API of the host running for `home`: the JSON body (an HTTP error raises)."""
    control = json.loads((home / "control.json").read_text())
    req = urllib.request.Request(control["url"] + path, headers={"Authorization": f"Bearer {control['token']}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


class HeadlessHost:
    def __init__(self, home: Path, keyring_env: dict[str, str], settings: dict | None = None,
                 net: HomeNetwork | None = None, net_index: int = 0) -> None:
        """`net`: the host runs in computer `net_index`'s namespace of that home network (its
        control API, on that namespace's loopback, is called from a thread inside it)."""
        self.home = home
        self.net, self.net_index = net, net_index
        self.env = {**os.environ, **keyring_env, "CADRE_DESKTOP_HOME": str(home),
                    "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        self.env.pop("QT_QPA_PLATFORM", None)
        self.proc: subprocess.Popen | None = None
        #: When set, the host runs with this many file descriptors at most (soft and hard),
        #: as under `ulimit -n`.
        self.fd_limit: int | None = None
        home.mkdir(parents=True, exist_ok=True)
        if settings is not None:
            (home / "settings.json").write_text(json.dumps(settings))

    @property
    def control(self) -> dict:
        return json.loads((self.home / "control.json").read_text())

    def start(self, wait: bool = True) -> HeadlessHost:
        self.stderr_path = self.home / f"host-stderr-{random.getrandbits(32):08x}.txt"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            self._in_net([sys.executable, "-m", "cadre_desktop", "--headless"]),
            env=self.env, stdout=subprocess.DEVNULL, stderr=self._stderr, cwd=self.home,
            preexec_fn=self._limit_fds if self.fd_limit else None,
        )
        if wait:
            wait_until(self._ready, timeout=30, interval=0.02, what="headless host control.json")
        return self

    def _in_net(self, argv: list[str]) -> list[str]:
        return argv if self.net is None else self.net.command_in(self.net_index, argv)

    def _limit_fds(self) -> None:
        import resource

        assert self.fd_limit is not None  # set as preexec_fn only when there is a limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

    def _ready(self) -> bool:
        assert self.proc is not None, "not started"
        if self.proc.poll() is not None:
            raise AssertionError(f"host exited with {self.proc.returncode}: {self.stderr()}")
        try:
            return self.control.get("pid") == self.proc.pid
        except (OSError, ValueError):
            return False

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        if self.net is not None:
            return self.net.call_in(self.net_index, lambda: control_request(self.home, method, path, body))
        return control_request(self.home, method, path, body)

    def node(self, node_id: str) -> dict:
        status, body = self.api("GET", f"/api/nodes/{node_id}")
        assert status == 200, body
        return body

    def cli(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self._in_net([sys.executable, "-m", "cadre_desktop", *args]), env=self.env,
                              capture_output=True, text=True, input=input, timeout=60)

    def stop(self) -> int:
        assert self.proc is not None, "not started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self._stderr.close()
        return self.proc.returncode

    def kill(self) -> None:
        assert self.proc is not None, "not started"
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._stderr.close()
