"""Real node processes on 127.0.0.1, started and talked to over HTTP (the `nodes` fixture).

Every wait is a poll of a condition against a deadline; nothing sleeps in the hope
that something has happened. Every node a test starts is stopped with SIGTERM at
teardown and must exit 0, and its logs must not contain any secret the test saw.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.polling import async_wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_DEADLINE_S = 15.0
STOP_DEADLINE_S = 5.0


def free_ports(count: int) -> list[int]:
    """`count` different ports free on 127.0.0.1 now: each socket stays bound until all are
    chosen, so the OS cannot hand the same port out twice (two calls of one-port-at-a-time
    could, and a node given the same API and P2P port exits 3)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def free_port() -> int:
    return free_ports(1)[0]


def new_secret() -> str:
    return secrets.token_urlsafe(24)


def base_env() -> dict[str, str]:
    """This process's environment without any CADRE_ variable, able to import us."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def poll(
    condition: Callable[[], Any], *, deadline_s: float = 10.0, what: str = "condition"
) -> Any:
    """Await ``condition()`` (sync or async) until it returns something truthy."""
    return await async_wait_until(condition, timeout=deadline_s, interval=0.02, what=what)


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def error_code(self) -> str | None:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return self.body["error"].get("code")
        return None


@dataclass
class NodeProcess:
    node_id: str
    node_dir: Path
    api_port: int
    p2p_port: int
    env: dict[str, str]
    session: aiohttp.ClientSession
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0
    exited: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def claim_secret(self) -> str | None:
        return self.env.get("CADRE_CLAIM_SECRET")

    def spawn(self) -> None:
        self.runs += 1
        out = open(self.log_dir / f"{self.node_id}.{self.runs}.out", "wb")
        err = open(self.log_dir / f"{self.node_id}.{self.runs}.err", "wb")
        with out, err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cadre_desktop.node"],
                env=self.env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=self.log_dir,
            )

    def logs(self) -> str:
        parts = []
        for path in sorted(self.log_dir.glob(f"{self.node_id}.*")):
            parts.append(path.read_text(errors="replace"))
        return "".join(parts)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def wait_ready(self) -> dict[str, Any]:
        async def answered() -> dict[str, Any] | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"node {self.node_id} exited with {self.proc.returncode} before "
                    f"answering:\n{self.logs()}"
                )
            try:
                reply = await self.get("/status", timeout=0.5)
            except (TimeoutError, aiohttp.ClientError):
                return None
            return reply.body if reply.status == 200 else None

        return await poll(answered, deadline_s=READY_DEADLINE_S, what=f"{self.node_id} ready")

    async def status(self) -> dict[str, Any]:
        reply = await self.get("/status")
        assert reply.status == 200
        return reply.body

    async def wait_state(self, state: str, deadline_s: float = 10.0) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            body = await self.status()
            return body if body["state"] == state else None

        return await poll(reached, deadline_s=deadline_s, what=f"{self.node_id} {state}")

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: bytes | str | None = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 5.0,
    ) -> Reply:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        async with self.session.request(
            method,
            self.url + path,
            json=json,
            data=data,
            headers=all_headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            text = await resp.text()
            is_json = resp.content_type == "application/json"
            body: Any = jsonlib.loads(text) if is_json else text
            return Reply(resp.status, body, dict(resp.headers))

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, **kw: Any) -> Reply:
        return await self.request("POST", path, **kw)

    async def claim(self, cadre: str, secret: str | None = None) -> Reply:
        return await self.post(
            "/claim", json={"secret": secret or self.claim_secret, "cadre": cadre}
        )

    def send(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    async def wait_exit(self, deadline_s: float = STOP_DEADLINE_S) -> int:
        assert self.proc is not None
        proc = self.proc
        await poll(lambda: proc.poll() is not None, deadline_s=deadline_s, what="exit")
        self.exited.append(proc.returncode)
        return proc.returncode

    async def stop(self) -> int:
        self.send(signal.SIGTERM)
        return await self.wait_exit()

    async def restart(self) -> dict[str, Any]:
        assert not self.running
        self.spawn()
        return await self.wait_ready()


class NodeLauncher:
    """Starts nodes in a test's temp folder and checks them at teardown."""

    def __init__(self, root: Path, session: aiohttp.ClientSession) -> None:
        self.root = root
        self.session = session
        self.nodes: list[NodeProcess] = []
        self.secrets: set[str] = set()

    def redact(self, *values: str) -> None:
        """Values that must appear in no node's output."""
        self.secrets.update(v for v in values if v)

    def env_for(
        self,
        node_id: str,
        *,
        claim_secret: str | None = None,
        invitation: str | None = None,
        node_dir: Path | None = None,
        api_port: int | None = None,
        p2p_port: int | None = None,
        extra: dict[str, str] | None = None,
        donated: dict[str, str] | None = None,
    ) -> dict[str, str]:
        env = base_env()
        spare = free_ports(3)  # three, so neither one given can be the other's pick
        env.update(
            CADRE_NODE_ID=node_id,
            CADRE_NODE_DIR=str(node_dir or self.root / "nodes" / node_id),
            CADRE_API_HOST="127.0.0.1",
            CADRE_API_PORT=str(api_port or next(p for p in spare if p != p2p_port)),
            CADRE_P2P_PORT=str(p2p_port or next(p for p in reversed(spare) if p != api_port)),
            CADRE_ADVERTISE_HOST="127.0.0.1",
        )
        if donated is not None:
            env.update(donated)
        elif invitation is not None:
            env["CADRE_INVITATION"] = invitation
        else:
            env["CADRE_CLAIM_SECRET"] = claim_secret or new_secret()
        env.update(extra or {})
        return env

    def launch(self, node_id: str = "node-a", **kw: Any) -> NodeProcess:
        """Spawn a node without waiting for it."""
        env = self.env_for(node_id, **kw)
        self.redact(env.get("CADRE_CLAIM_SECRET", ""), env.get("CADRE_INVITATION", ""),
                    env.get("CADRE_SEED_TOKEN", ""))
        log_dir = self.root / "logs"
        log_dir.mkdir(exist_ok=True)
        node = NodeProcess(
            node_id=node_id,
            node_dir=Path(env["CADRE_NODE_DIR"]),
            api_port=int(env["CADRE_API_PORT"]),
            p2p_port=int(env["CADRE_P2P_PORT"]),
            env=env,
            session=self.session,
            log_dir=log_dir,
        )
        self.nodes.append(node)
        node.spawn()
        return node

    async def start(self, node_id: str = "node-a", **kw: Any) -> NodeProcess:
        """Start a node and wait until ``/status`` answers. Retries a port race."""
        for _ in range(3):
            node = self.launch(node_id, **kw)
            try:
                await node.wait_ready()
                return node
            except AssertionError:
                assert node.proc is not None
                if node.proc.returncode != 3 or "api_port" in kw or "p2p_port" in kw:
                    raise
                node.exited.append(3)  # a port taken between free_port() and bind
        raise AssertionError("could not find free ports in three tries")

    def run_to_exit(self, env: dict[str, str], timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        """Run a node expected to stop by itself (a start-up failure)."""
        return subprocess.run(
            [sys.executable, "-m", "cadre_desktop.node"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    async def close(self) -> None:
        problems = []
        for node in self.nodes:
            if not node.running:
                continue
            try:
                code = await node.stop()
            except AssertionError:
                assert node.proc is not None
                node.proc.kill()
                node.proc.wait()
                problems.append(f"{node.node_id} did not stop on SIGTERM")
                continue
            if code != 0:
                problems.append(f"{node.node_id} exited {code} on SIGTERM")
        for node in self.nodes:
            logs = node.logs()
            for value in self.secrets:
                if value in logs:
                    problems.append(f"a secret appears in the output of {node.node_id}")
        assert not problems, "; ".join(problems)
