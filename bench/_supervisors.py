"""The supervisors the respawn benchmark compares, each running one node (or `count`).

Every one of them starts the same command, `stamp FILE python -m
cadre_desktop.node`, with the node contract's environment, configured for an
immediate, unlimited restart:

* ours: the real headless host (`python -m cadre_desktop --headless`), the node
  added through its control API, so its claim secret sits in the real keyring;
  `respawn_backoff_base_ms` = `respawn_backoff_max_ms` = 1, a million attempts.
* supervisord: `autorestart=true`, `startsecs=0`, a million `startretries`.
* pm2: fork mode, `interpreter: none`, `restart_delay: 0`, a million `max_restarts`.
* floor: bench/floor_supervisor.py, a bare pidfd loop in Python.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from _rig import ROOT, node_command, node_env, pm2_binary, read_stamps, supervisord_binary

from tests.support.headless import HeadlessHost


class Supervised:
    """One supervisor with `count` nodes (one for the respawn benchmark); `stamps` collects child starts.

    Node i listens on `api_port + 2 i` (its P2P port is the next one) and works in `node<i>/`.
    """

    name = "?"

    def __init__(self, work: Path, stamp: Path, api_port: int, program: list[str] | None = None,
                 count: int = 1) -> None:
        self.work = work
        self.program = program or node_command()
        self.stamp_bin = stamp
        self.stamps = work / "stamps.txt"
        self.api_port = api_port
        self.p2p_port = api_port + 1
        self.count = count
        self.node_dir = work / "node"
        self.work.mkdir(parents=True, exist_ok=True)

    @property
    def slug(self) -> str:
        return self.name.split()[0]

    def instance_env(self, i: int) -> dict[str, str]:
        if i == 0:
            return self.env()
        return node_env(f"bench-{self.slug}-{i}", self.work / f"node{i}", self.api_port + 2 * i,
                        self.api_port + 2 * i + 1)

    def ports(self) -> list[int]:
        """The API port of each node, node 0 first."""
        return [self.api_port + 2 * i for i in range(self.count)]

    def node_vars(self, i: int) -> dict[str, str]:
        return {k: v for k, v in self.instance_env(i).items() if k.startswith("CADRE_") or k == "PYTHONUNBUFFERED"}

    def host_pid(self) -> int | None:
        """The supervising process (whose footprint the idle benchmark samples)."""
        proc = getattr(self, "proc", None)
        return proc.pid if proc else None

    @property
    def command(self) -> list[str]:
        return [str(self.stamp_bin), str(self.stamps), *self.program]

    def env(self) -> dict[str, str]:
        return node_env(f"bench-{self.slug}", self.node_dir, self.api_port, self.p2p_port)

    def current_pid(self) -> int | None:
        rows = read_stamps(self.stamps)
        return rows[-1][0] if rows else None

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def version(self) -> str:
        return ""


class Ours(Supervised):
    name = "cadre-desktop"

    def __init__(self, work: Path, stamp: Path, api_port: int, program: list[str] | None = None, *,
                 keyring_env: dict[str, str], settings: dict | None = None, engine: Path | None = None,
                 count: int = 1) -> None:
        if engine is not None:
            # Another checkout's engine, for before/after comparisons in one run.
            self.name = f"cadre-desktop @ {engine.name}"
        super().__init__(work, stamp, api_port, program, count)
        # One node: exactly its two ports. More: a few spare ones, in case one is taken.
        spare = 0 if count == 1 else 20
        self.settings = {
            "node_command": self.command,
            "bind_host": "127.0.0.1",
            "advertise_host": "127.0.0.1",
            "port_range": [api_port, api_port + 2 * count - 1 + spare],
            "respawn_backoff_base_ms": 1,
            "respawn_backoff_max_ms": 1,
            "respawn_max_attempts": 1000,  # the setting's ceiling; a run kills each child far fewer times
            **(settings or {}),
        }
        self.host = HeadlessHost(work / "home", keyring_env, self.settings)
        if engine is not None:
            self.host.env["PYTHONPATH"] = str(engine)
        self.node_id: str | None = None
        self.node_ports: list[int] = []

    def host_pid(self) -> int | None:
        return self.host.proc.pid if self.host.proc else None

    #: Warm starts on (a standby takes each respawn); see `OursWarm`.
    warm = False

    def start(self) -> None:
        self.host.start()
        for i in range(self.count):
            status, body = self.host.api("POST", "/api/nodes", {"name": "bench" if self.count == 1 else f"bench {i}"})
            if status != 201:
                raise RuntimeError(f"adding a node failed: {status} {body}")
            self.node_ports.append(body["api_port"])
            if i == 0:
                self.node_id = body["id"]
                self.api_port = body["api_port"]
                self.node_dir = self.host.home / "nodes" / self.node_id

    def ports(self) -> list[int]:
        return list(self.node_ports)

    def stop(self) -> None:
        if self.host.proc is not None:
            self.host.stop()

    def version(self) -> str:
        from cadre_desktop import __version__
        return __version__


class Supervisord(Supervised):
    name = "supervisord"

    def start(self) -> None:
        text = (
            "[supervisord]\n"
            "nodaemon=true\n"
            f"logfile={self.work}/supervisord.log\n"
            f"pidfile={self.work}/supervisord.pid\n"
            f"childlogdir={self.work}\n"
            "loglevel=warn\n"
        )
        for i in range(self.count):
            pairs = ",".join(f'{k}="{v}"' for k, v in self.node_vars(i).items())
            text += (
                f"\n[program:node{i}]\n"
                f"command={' '.join(self.command)}\n"
                f"directory={self.work}\n"
                f"environment={pairs.replace('%', '%%')}\n"
                "autostart=true\n"
                "autorestart=true\n"
                "startsecs=0\n"
                "startretries=1000000\n"
                "stopsignal=TERM\n"
                "stopwaitsecs=5\n"
                f"stdout_logfile={self.work}/node{i}.log\n"
                "redirect_stderr=true\n"
            )
        conf = self.work / "supervisord.conf"
        conf.write_text(text)
        self.proc = subprocess.Popen([str(supervisord_binary()), "-n", "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=open(self.work / "stderr.txt", "wb"),
                                     cwd=self.work)

    def stop(self) -> None:
        if getattr(self, "proc", None) and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            # It stops its programs over several ticks: 100 take more than 30 s here.
            self.proc.wait(timeout=30 + self.count)

    def version(self) -> str:
        out = subprocess.run([str(supervisord_binary()), "--version"], capture_output=True, text=True)
        return out.stdout.strip()


class Pm2(Supervised):
    name = "pm2"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PM2_HOME": str(self.work / "pm2-home")}

    def start(self) -> None:
        apps = [{
            "name": f"node{i}",
            "script": self.command[0],
            "args": self.command[1:],
            "interpreter": "none",
            "exec_mode": "fork",
            "cwd": str(self.work),
            "autorestart": True,
            "restart_delay": 0,
            "max_restarts": 1_000_000,
            "watch": False,
            "out_file": str(self.work / f"node{i}.log"),
            "error_file": str(self.work / f"node{i}.log"),
            "env": self.node_vars(i),
        } for i in range(self.count)]
        eco = self.work / "ecosystem.json"
        eco.write_text(json.dumps({"apps": apps}))
        subprocess.run([str(pm2_binary()), "start", str(eco)], env=self._env(), check=True,
                       stdout=subprocess.DEVNULL, stderr=open(self.work / "stderr.txt", "wb"), timeout=60 + self.count)

    def host_pid(self) -> int | None:
        try:
            return int((self.work / "pm2-home" / "pm2.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        subprocess.run([str(pm2_binary()), "kill"], env=self._env(), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60 + self.count)

    def version(self) -> str:
        pkg = pm2_binary().resolve().parents[1] / "package.json"
        try:
            return json.loads(pkg.read_text())["version"]
        except (OSError, ValueError, KeyError):
            return "unknown"


class Floor(Supervised):
    name = "floor (pidfd loop)"

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "floor_supervisor.py"), *self.command],
                                     env=self.env(), stdout=open(self.work / "node.log", "wb"),
                                     stderr=subprocess.STDOUT, cwd=self.work)

    def stop(self) -> None:
        if getattr(self, "proc", None) and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


class OursWarm(Ours):
    """Our host with `warm_standby` on: each respawn takes the loaded standby.

    The stamp wrapper runs when a standby starts, before any kill, so (a) has
    no meaning here; the child's pid comes from the control API instead.
    """

    name = "cadre-desktop (warm)"
    warm = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.name = OursWarm.name
        self.settings["warm_standby"] = True
        self.host = HeadlessHost(self.work / "home", kwargs["keyring_env"], self.settings)

    def current_pid(self) -> int | None:
        if self.node_id is None or self.host.proc is None:
            return None
        status, body = self.host.api("GET", f"/api/nodes/{self.node_id}")
        return body.get("pid") if status == 200 and body.get("running") else None
