"""What a node's unit is called and started with, and what its end means: pure functions.

A unit is `cadre-<home id>-<node id>-<attempt>.service` (a node id's characters are all
allowed in a unit name; the attempt is what follows the last `-`), so a start of an
attempt that already runs finds it by name, and a host that comes back finds its home's
units by the pattern `cadre-<home id>-*.service`.

Its properties hold nothing secret: the node contract's plain variables (`Environment`),
its folder, its caps and where its output goes. The secrets come on its stdin, a pipe
whose read end is handed over with the call (`StandardInputFileDescriptor`): the node
reads the one line the node contract's standby reads (`{"env": {...}}`) and is that node
from then on. `systemctl --user show` prints `StandardInput=fd` and nothing of the line.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadre_desktop.host.core.driver import NodeCaps

PREFIX = "cadre-"
SUFFIX = ".service"
#: Set in a unit's environment: the node reads its variables from stdin (node contract, "Standby").
STANDBY_VAR = "CADRE_STANDBY"
#: The host's variables a unit's environment may carry beside the node's own (never the rest:
#: a person's environment may hold secrets of their own, and a unit's shows to anyone who asks).
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH")
#: The node contract's variables that must never reach a unit's properties.
SECRET_VARS = ("CADRE_CLAIM_SECRET", "CADRE_INVITATION", "CADRE_SEED_TOKEN")
#: Exit status systemd gives a unit whose program could not be executed (EXIT_EXEC).
EXIT_EXEC = 203
NICE = 10


def family(home_id: str) -> str:
    return f"{PREFIX}{home_id}-"


def unit_name(home_id: str, node_id: str, attempt: int) -> str:
    return f"{family(home_id)}{node_id}-{attempt}{SUFFIX}"


def parse_name(home_id: str, unit: str) -> tuple[str, int] | None:
    """(node id, attempt) of one of this home's units, else None."""
    head = family(home_id)
    if not unit.startswith(head) or not unit.endswith(SUFFIX):
        return None
    node_id, _, attempt = unit[len(head):-len(SUFFIX)].rpartition("-")
    if not node_id or not attempt.isdigit():
        return None
    return node_id, int(attempt)


def node_vars(*, node_id: str, work: Path, bind_host: str, ports: tuple[int, int], advertise_host: str,
              attempt: int, secret_env: Mapping[str, str]) -> dict[str, str]:
    """The node contract's variables of one start (§1), its secrets included: they go on its stdin only."""
    env = {
        "CADRE_NODE_ID": node_id, "CADRE_NODE_DIR": str(work), "CADRE_API_HOST": bind_host,
        "CADRE_API_PORT": str(ports[0]), "CADRE_P2P_PORT": str(ports[1]), "CADRE_ADVERTISE_HOST": advertise_host,
        "CADRE_START_ATTEMPT": str(attempt), "PYTHONUNBUFFERED": "1",
    }
    env.update(secret_env)
    return env


def stdin_line(env: Mapping[str, str]) -> bytes:
    """The one line the node reads on its stdin: every CADRE_ variable, secrets included."""
    return (json.dumps({"env": {k: v for k, v in env.items() if k.startswith("CADRE_")}}) + "\n").encode()


def plain_env(env: Mapping[str, str], host_env: Mapping[str, str]) -> list[str]:
    """The unit's `Environment`: the node's variables but its secrets, and the few of the host's that a
    program needs to run (PASSED_ON); never a secret, whatever `env` holds."""
    plain = {k: host_env[k] for k in PASSED_ON if host_env.get(k)}
    plain.update({k: v for k, v in env.items() if not is_secret(k)})
    plain[STANDBY_VAR] = "1"
    return [f"{k}={v}" for k, v in sorted(plain.items())]


def is_secret(name: str) -> bool:
    """A variable that must stay out of a unit: the node contract's secrets, and anything named like one."""
    return name in SECRET_VARS or any(word in name for word in ("SECRET", "TOKEN", "INVITATION", "PASSWORD", "KEY"))


def exec_start(command: Sequence[str]) -> list[object]:
    """`ExecStart` as D-Bus wants it: the program's absolute path, the whole argv, fail on failure."""
    program = command[0]
    found = shutil.which(program) if "/" not in program else program
    return [[str(Path(found or program).absolute()), list(command), False]]


@dataclass(frozen=True)
class Start:
    """Everything a unit is started with but its stdin."""

    command: tuple[str, ...]
    env: list[str]
    work: Path
    log: Path
    stop_timeout_s: float
    caps: NodeCaps
    description: str


def properties(start: Start) -> list[tuple[str, str, Any]]:
    """The unit's properties as (name, D-Bus signature, value); fd index 0 is the node's stdin."""
    props: list[tuple[str, str, Any]] = [
        ("Description", "s", start.description),
        ("ExecStart", "a(sasb)", exec_start(start.command)),
        ("Environment", "as", start.env),
        ("WorkingDirectory", "s", str(start.work)),
        ("UMask", "u", 0o077),
        ("StandardInputFileDescriptor", "h", 0),
        ("StandardOutputFileToAppend", "s", str(start.log)),
        ("StandardError", "s", "inherit"),
        # The host supervises: its backoff, budget and give-up; a unit restarting itself would hide every crash.
        ("Restart", "s", "no"),
        ("Type", "s", "exec"),
        ("KillMode", "s", "control-group"),
        ("SendSIGKILL", "b", True),
        # The host kills at its own stop timeout (KillUnit); the manager's own kill is the backstop.
        ("TimeoutStopUSec", "t", int((start.stop_timeout_s + 5.0) * 1_000_000)),
        ("CollectMode", "s", "inactive-or-failed"),
    ]
    caps = start.caps
    if caps.memory_mb:
        props.append(("MemoryMax", "t", caps.memory_mb << 20))
        props.append(("MemorySwapMax", "t", 0))
    if caps.cpu_percent:
        props.append(("CPUQuotaPerSecUSec", "t", caps.cpu_percent * 10_000))
    if caps.low_priority:
        props.append(("Nice", "i", NICE))
    return props


def returncode(exec_main_code: int, exec_main_status: int) -> int | None:
    """The code as the local driver gives it: the exit status, or minus the signal (CLD_KILLED, CLD_DUMPED)."""
    if exec_main_code == 1:
        return exec_main_status
    if exec_main_code in (2, 3):
        return -exec_main_status
    return None


def env_of(lines: Sequence[str]) -> dict[str, str]:
    """A unit's `Environment` (K=V lines) as a mapping."""
    return dict(line.split("=", 1) for line in lines if "=" in line)


def caps_words(caps: NodeCaps) -> str:
    held = [w for w, on in (("MemoryMax", caps.memory_mb), ("CPUQuota", caps.cpu_percent),
                            ("Nice", caps.low_priority)) if on]
    return "systemd unit" + (f" ({', '.join(held)})" if held else "")
