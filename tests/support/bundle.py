"""Build the PyInstaller bundle once, and drive its executable like a person would.

Nothing here runs this checkout's Python code: every command is the bundle's own
executable, with no PYTHONPATH, so a module the spec failed to collect shows up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support import port_blocks
from tests.support.headless import control_request
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
APP = "cadre-desktop"
BUILD_TIMEOUT_S = 600


#: PyInstaller's cache of this checkout's own (in its .venv): two suites building at once on one
#: machine shared ~/.cache/pyinstaller, and one build read the other's half-written cache ("bincache
#: may be corrupted"); a checkout's runs still keep their cache from one run to the next.
PYINSTALLER_CACHE = REPO / ".venv" / "pyinstaller-cache"


def run_script(script: str, *args: str, log: Path) -> None:
    """bash packaging/<script> with `args`, its output in `log`; its tail in the error if it fails."""
    env = {**os.environ, "PYINSTALLER_CONFIG_DIR": str(PYINSTALLER_CACHE)}
    with open(log, "wb") as sink:
        done = subprocess.run(["bash", str(REPO / "packaging" / script), *args], stdout=sink, env=env,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=BUILD_TIMEOUT_S, cwd=REPO)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise AssertionError(f"packaging/{script} exited with {done.returncode}:\n{tail}")


def build(out: Path) -> Path:
    """`packaging/build.sh` (the README's Linux build command) into `out`; the bundle's folder."""
    run_script("build.sh", "--dist", str(out / "dist"), "--work", str(out / "work"), "--no-archive",
               log=out / "build.log")
    return out / "dist" / APP


def build_deb(bundle_dir: Path, out: Path) -> Path:
    """`packaging/build-deb.sh --fast` from the bundle in `bundle_dir` into `out`; the .deb."""
    run_script("build-deb.sh", "--bundle", str(bundle_dir), "--out", str(out / "dist"), "--work", str(out / "work"),
               "--fast", log=out / "build-deb.log")
    debs = list((out / "dist").glob(f"{APP}_*.deb"))
    assert len(debs) == 1, debs
    return debs[0]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would let a Python find this checkout or a venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CADRE_", "QT_")) and k not in ("WAYLAND_DISPLAY",)}
    env.pop("DISPLAY", None)
    env.update(extra)
    return env


def loopback_settings() -> dict:
    low = port_blocks.take(50, 30000, 32700)
    return {"bind_host": "127.0.0.1", "advertise_host": "127.0.0.1", "port_range": [low, low + 49],
            "probe_interval_ms": 200, "sweep_ms": 1000, "stop_timeout_ms": 3000}


class BundledHost:
    """`cadre-desktop --headless` from the bundle, with its home in `home`."""

    def __init__(self, exe: Path, home: Path, env: dict[str, str], **settings: object) -> None:
        self.exe = exe
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        (home / "settings.json").write_text(json.dumps({**loopback_settings(), **settings}))
        self.env = clean_env(**env, CADRE_DESKTOP_HOME=str(home))
        self.proc: subprocess.Popen | None = None
        self.stderr_path = home / "host-stderr.txt"

    def start(self, timeout: float = 30) -> float:
        """Start it; the seconds until its control API answered."""
        self._stderr = open(self.stderr_path, "wb")
        started = time.monotonic()
        self.proc = subprocess.Popen([str(self.exe), "--headless"], env=self.env, cwd=self.home,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr)
        wait_until(self._answers, timeout=timeout, interval=0.01, what="the bundled host's control API")
        return time.monotonic() - started

    def _answers(self) -> bool:
        assert self.proc is not None, "not started"
        if self.proc.poll() is not None:
            raise AssertionError(f"the bundled host exited with {self.proc.returncode}: {self.stderr()}")
        try:
            if json.loads((self.home / "control.json").read_text()).get("pid") != self.proc.pid:
                return False
            return self.api("GET", "/api/nodes")[0] == 200
        except (OSError, ValueError):
            return False

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        return control_request(self.home, method, path, body)

    def add_node(self, name: str, timeout: float = 30) -> dict:
        """A node added through the control API; its view once it runs and answers."""
        status, node = self.api("POST", "/api/nodes", {"name": name})
        assert status == 201, node

        def ready():
            view = self.api("GET", f"/api/nodes/{node['id']}")[1]
            return view if view["ready"] else None
        return wait_until(ready, timeout=timeout, what=f"node {name} running and ready")

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.exe), *args], env=self.env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)

    def stop(self) -> int:
        assert self.proc is not None, "not started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self._stderr.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
