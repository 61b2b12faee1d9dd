"""A systemd user manager of the tests' own, isolated from the rest of the machine.

What it takes (found on this project's test machines: a VM whose init is not systemd,
cgroup v1 controllers beside a v2 `unified` hierarchy, tests running as root):

- **A cgroup subtree of its own**, never the top of the tree: a manager whose cgroup is
  the root one moves *every process of the machine* into its `init.scope`. The rig makes
  `cadre-rig-<id>` in every hierarchy a manager uses (the v2 one, v1's `name=systemd`, and
  the v1 `memory`, `cpu`, `cpuacct`, `pids` controllers, so `MemoryMax`, `CPUQuota` and
  `TasksMax` hold), moves only its own starter shell in, and execs the manager there: the
  manager's root is that subtree and it moves only what is in it.
- **`/run/systemd/system`**, without which a manager refuses to run: made on a tmpfs over
  `/run/systemd` in a mount namespace of the manager's own (`unshare -m`), so nothing
  else on the machine sees a systemd it does not have.
- **`XDG_RUNTIME_DIR`** (0700, a temporary folder) and `HOME` of its own, and **its session
  bus**: the user units the distribution ships (`dbus.socket`) make
  `$XDG_RUNTIME_DIR/bus`, on which the manager registers `org.freedesktop.systemd1`.

It runs as the tests' user. `moved_others()` is the proof the rig moved no process it
did not start: every process that ran before it started is in the same systemd cgroups
(the `0::` and `name=systemd` lines of `/proc/<pid>/cgroup`, the ones a manager moves
processes in) after, but for the rig's own. `stop()` ends the manager, kills whatever is
left in its subtree and removes the subtree.

`unavailable()` says why no manager can be had here: only no systemd installed is a
reason to skip (tests/conftest.py says so on the run's last line).
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from tests.support.polling import wait_until

SYSTEMD_BINARIES = (Path("/lib/systemd/systemd"), Path("/usr/lib/systemd/systemd"))
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")
#: The lines of /proc/<pid>/cgroup a systemd manager moves processes in.
SYSTEMD_LINES = ("0::", "name=systemd:")
START_S = 30.0


def systemd_binary() -> Path | None:
    return next((p for p in SYSTEMD_BINARIES if p.exists()), None)


def unavailable() -> str | None:
    """Why no manager of the tests' own can run here, or None."""
    if systemd_binary() is None:
        return "no systemd installed on this machine"
    if os.geteuid() != 0:
        return "the rig makes a cgroup subtree and a mount namespace: it needs root (the test machines' user)"
    if shutil.which("unshare") is None:
        return "util-linux's unshare is missing"
    return None


def cgroup_mounts() -> dict[str, Path]:
    """Where each hierarchy a manager uses is mounted: "unified", "systemd" and the v1 controllers."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        kind, where, options = fields[2], Path(fields[1]), fields[3].split(",")
        if kind == "cgroup2":
            found["unified"] = where
        elif kind == "cgroup":
            if "name=systemd" in options:
                found["systemd"] = where
            found.update({c: where for c in V1_CONTROLLERS if c in options})
    return found


def systemd_cgroups(pid: int) -> tuple[str, ...] | None:
    """The pid's lines of the hierarchies a manager moves processes in; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return tuple(line.split(":", 1)[1] for line in text.splitlines()
                 if any(line.split(":", 1)[1].startswith(kind) for kind in SYSTEMD_LINES) and ":" in line)


def census() -> dict[int, tuple[str, ...]]:
    """Every process's systemd cgroups now, its start time first (a pid reused meanwhile is
    another process, never taken for one the rig moved)."""
    seen = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (lines := systemd_cgroups(int(entry.name))) is not None:
            try:
                started = (entry / "stat").read_text().rsplit(")", 1)[1].split()[19]
            except (OSError, IndexError):
                continue
            seen[int(entry.name)] = (f"started {started}", *lines)
    return seen


def moved(before: dict[int, tuple[str, ...]], after: dict[int, tuple[str, ...]], ours: str) -> dict[int, tuple]:
    """The processes of `before` still there (the same start time) whose cgroups changed, but for those
    now in the subtree `ours`."""
    return {pid: (lines, after[pid]) for pid, lines in before.items()
            if pid in after and after[pid][:1] == lines[:1] and after[pid] != lines
            and not any(f"/{ours}" in line for line in after[pid])}


class UserManager:
    """One isolated user manager: `start()`, then its bus `address`, `runtime` folder and `name`."""

    def __init__(self, base: Path | None = None) -> None:
        self.base = base or Path(tempfile.mkdtemp(prefix="cadre-rig-"))
        self.name = f"cadre-rig-{os.getpid()}-{secrets.token_hex(3)}"
        self.runtime = self.base / "run"
        self.home = self.base / "home"
        self.address = f"unix:path={self.runtime / 'bus'}"
        self.mounts = cgroup_mounts()
        self.before: dict[int, tuple[str, ...]] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.base / "manager.log"

    @property
    def env(self) -> dict[str, str]:
        """What a client of this manager (a host, systemctl) needs in its environment."""
        return {"DBUS_SESSION_BUS_ADDRESS": self.address, "XDG_RUNTIME_DIR": str(self.runtime)}

    def cgroup(self, hierarchy: str) -> Path:
        return self.mounts[hierarchy] / self.name

    def start(self) -> UserManager:
        reap_stale(self.mounts)
        self.runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        for hierarchy in self.mounts:
            self.cgroup(hierarchy).mkdir(exist_ok=True)
        procs = " ".join(str(self.cgroup(h) / "cgroup.procs") for h in self.mounts)
        script = (
            "set -e; mount -t tmpfs -o mode=0755 tmpfs /run/systemd; mkdir /run/systemd/system; "
            f"for p in {procs}; do echo $$ > $p; done; "
            f"exec env -i HOME={self.home} XDG_RUNTIME_DIR={self.runtime} PATH=/usr/bin:/bin "
            f"DBUS_SESSION_BUS_ADDRESS={self.address} {systemd_binary()} --user"
        )
        self.before = census()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, env={"PATH": "/usr/bin:/bin"})
        try:
            self._wait_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_up(self) -> None:
        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the user manager exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            # Not `is-system-running`: systemctl out here sees no /run/systemd/system and says "offline".
            state = self.systemctl("show", "--property=SystemState", "--value").stdout.strip()
            return state in ("running", "degraded")
        wait_until(up, timeout=START_S, interval=0.05, what=f"the user manager up (its log: {self.log})")

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["systemctl", "--user", "--no-pager", *args], env={"PATH": "/usr/bin:/bin", **self.env},
                              capture_output=True, text=True, timeout=30)

    def show(self, unit: str) -> str:
        """Everything `systemctl --user show` prints of a unit."""
        return self.systemctl("show", unit).stdout

    def units(self, pattern: str = "cadre-*") -> list[str]:
        out = self.systemctl("list-units", "--all", "--plain", "--no-legend", pattern).stdout
        return [line.split()[0] for line in out.splitlines() if line.strip()]

    def unit_cgroups(self, pattern: str = "cadre-") -> list[Path]:
        """The cgroup folders of units matching `pattern` in the manager's subtree, in any hierarchy."""
        return [p for h in self.mounts for p in self.cgroup(h).rglob(f"{pattern}*") if p.is_dir()]

    def moved_others(self) -> dict[int, tuple]:
        return moved(self.before, census(), self.name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # a user manager stops its units and exits on SIGTERM
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._empty_subtree()
        shutil.rmtree(self.base, ignore_errors=True)

    def _empty_subtree(self) -> None:
        unified = self.mounts.get("unified") or self.mounts.get("systemd")
        if unified is not None:
            for procs in (unified / self.name).rglob("cgroup.procs"):
                for pid in procs.read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
        for hierarchy in self.mounts:
            for folder in sorted((p for p in self.cgroup(hierarchy).rglob("*") if p.is_dir()),
                                 key=lambda p: -len(p.parts)) + [self.cgroup(hierarchy)]:
                try:  # killed processes leave their cgroup a moment later
                    wait_until(functools.partial(_removed, folder), timeout=10, interval=0.05, what=f"{folder} removed")
                except AssertionError:
                    pass


def reap_stale(mounts: dict[str, Path]) -> None:
    """The subtrees of rigs whose test run is gone (killed before it could stop its manager): what
    runs in them is ended and they are removed. A run still there (its pid alive) is left alone."""
    for root in {mounts[h] for h in mounts}:
        for folder in root.glob("cadre-rig-*-*"):
            pid = folder.name.split("-")[2]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            stale = UserManager.__new__(UserManager)
            stale.name, stale.mounts, stale.proc = folder.name, mounts, None
            stale._empty_subtree()


def _removed(folder: Path) -> bool:
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


#: The one manager of a test run (started at its first use, stopped at the run's end), and why
#: none could be had (the run's last line says it: tests/conftest.py).
_SESSION: UserManager | None = None
SKIPPED_WHY: str | None = None


def session_manager() -> UserManager:
    """The run's manager, started at its first use; where none can run, the test is skipped (saying why)."""
    global _SESSION, SKIPPED_WHY
    import pytest

    if _SESSION is None:
        if why := unavailable():
            SKIPPED_WHY = why
            pytest.skip(f"no systemd user manager for the tests: {why}")
        _SESSION = UserManager().start()
    return _SESSION


def stop_session_manager() -> None:
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None
