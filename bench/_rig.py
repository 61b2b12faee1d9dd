"""What the benchmarks need around the code they measure.

A real Secret Service (gnome-keyring on a private D-Bus session, the same one the
integration tests use), the `stamp` wrapper compiled from `bench/stamp.c`, the
other supervisors (supervisord from PyPI, pm2 from the npm registry) installed
into a cache folder outside the checkout, and small probes of a node's
`GET /status`.

Tools go to `$CADRE_BENCH_CACHE` (default `~/.cache/cadre-desktop-bench/`), never
into the repository, so no `node_modules` can be committed by accident.
"""

from __future__ import annotations

import http.client
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PM2_VERSION = "7.0.4"
SUPERVISOR_VERSION = "4.3.0"


def cache_dir() -> Path:
    path = Path(os.environ.get("CADRE_BENCH_CACHE") or Path.home() / ".cache" / "cadre-desktop-bench")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- keyring ----------------------------------------------------------------------

def start_secret_service():
    """A private, unlocked gnome-keyring; returns (session, env). Call session.stop() at the end."""
    from tests.support.session_bus import SecretServiceSession

    session = SecretServiceSession()
    return session, session.start()


# -- the stamp wrapper ------------------------------------------------------------------

def stamp_binary() -> Path:
    """Compile bench/stamp.c once (rebuilt when the source changes)."""
    source = ROOT / "bench" / "stamp.c"
    out = cache_dir() / "stamp"
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        sys.exit("bench: a C compiler (cc) is needed to build bench/stamp.c, the child-start stamp")
    subprocess.run([compiler, "-O2", "-o", str(out), str(source)], check=True)
    return out


def read_stamps(path: Path) -> list[tuple[int, int]]:
    """(pid, monotonic ns) per child start, oldest first."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            rows.append((int(parts[0]), int(parts[1])))
    return rows


def wait_new_stamp(path: Path, old_count: int, timeout: float, poll: float = 0.0005) -> tuple[int, int] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if path.stat().st_size:
                rows = read_stamps(path)
                if len(rows) > old_count:
                    return rows[old_count]
        except FileNotFoundError:
            pass
        time.sleep(poll)
    return None


# -- bytecode ---------------------------------------------------------------------------

def compile_checkout(checkout: Path = ROOT) -> None:
    """Write the .pyc files of a checkout's package, as an installed copy has them.

    With PYTHONDONTWRITEBYTECODE set (as in this project's shells and CI) a node
    run from a checkout never caches its bytecode and compiles every module of ours
    at every start: about 20 ms of CPU per node start on the 2-core VM, which no
    installed copy (wheel or bundle) pays. compileall writes them whatever that
    variable says.
    """
    import compileall

    compileall.compile_dir(str(checkout / "cadre_desktop"), quiet=1)


# -- the node's status ------------------------------------------------------------------

def status_ok(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/status")
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_status(port: int, timeout: float, poll: float = 0.001) -> int | None:
    """Monotonic ns of the first 200 from GET /status, or None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if status_ok(port):
            return time.monotonic_ns()
        time.sleep(poll)
    return None


def node_env(node_id: str, node_dir: Path, api_port: int, p2p_port: int) -> dict[str, str]:
    """The node contract's environment, as our orchestrator would set it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    env.update(
        CADRE_NODE_ID=node_id,
        CADRE_NODE_DIR=str(node_dir),
        CADRE_API_HOST="127.0.0.1",
        CADRE_API_PORT=str(api_port),
        CADRE_P2P_PORT=str(p2p_port),
        CADRE_ADVERTISE_HOST="127.0.0.1",
        CADRE_CLAIM_SECRET=secrets.token_urlsafe(32),
        PYTHONUNBUFFERED="1",
    )
    return env


def node_command() -> list[str]:
    return [sys.executable, "-m", "cadre_desktop.node"]


# -- other supervisors ------------------------------------------------------------------

def supervisord_binary() -> Path:
    """supervisord next to this Python if installed there, else in a bench venv (installed once)."""
    here = Path(sys.executable).parent / "supervisord"
    if here.exists():
        return here
    venv = cache_dir() / "supervisor-venv"
    binary = venv / "bin" / "supervisord"
    if not binary.exists():
        print(f"bench: installing supervisor {SUPERVISOR_VERSION} from PyPI into {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"supervisor=={SUPERVISOR_VERSION}"], check=True)
    return binary


def pm2_binary() -> Path:
    """pm2 from the npm registry in the bench cache (installed once)."""
    prefix = cache_dir() / "pm2"
    binary = prefix / "node_modules" / ".bin" / "pm2"
    if not binary.exists():
        if shutil.which("npm") is None:
            sys.exit("bench: npm is needed to install pm2 (apt install nodejs npm)")
        print(f"bench: installing pm2 {PM2_VERSION} from the npm registry into {prefix}", file=sys.stderr)
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-fund", "--no-audit", "--prefix", str(prefix), f"pm2@{PM2_VERSION}"],
                       check=True, stdout=subprocess.DEVNULL)
    return binary


def tool_version(argv: list[str], env: dict | None = None) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
        return (out.stdout or out.stderr).strip().splitlines()[-1]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "unknown"
