"""`cadre-desktop doctor`: can this computer host cadre nodes, and if not, what to do.

Each check is a small function returning a CheckResult, so tests can run one
alone with fakes. Required checks decide the exit code; the others (a running
host, the tray and notifications) only inform. Notifications are asked of the
service the app uses (desktop-notifier), not of Qt's tray, which is only its fallback. A missing display is "skipped",
never a failure: the headless host needs none.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from cadre_desktop.errors import CadreError
from cadre_desktop.logs import logtail
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings, load_settings

NODE_START_TIMEOUT_S = 15.0
DISPLAY_PROBE_TIMEOUT_S = 20.0


class Outcome(str, Enum):
    OK = "ok"
    FAIL = "FAIL"
    WARN = "warn"
    SKIPPED = "skipped"
    INFO = "info"


@dataclass(frozen=True)
class CheckResult:
    name: str
    outcome: Outcome
    #: What is fine, or what to do about it.
    detail: str
    required: bool = True

    @property
    def failed(self) -> bool:
        return self.required and self.outcome is Outcome.FAIL

    def line(self) -> str:
        return f"{self.outcome.value:<8}{self.name}: {self.detail}"


def ok(name: str, detail: str, required: bool = True) -> CheckResult:
    return CheckResult(name, Outcome.OK, detail, required)


def fail(name: str, detail: str, required: bool = True) -> CheckResult:
    return CheckResult(name, Outcome.FAIL, detail, required)


# -- the checks ---------------------------------------------------------------------------

def check_settings(paths: Paths) -> tuple[CheckResult, Settings]:
    """The settings the other checks use: the file's, or the defaults when it is broken."""
    try:
        settings = load_settings(paths.settings_file)
    except CadreError as exc:
        return fail("settings", f"{exc.message} (the checks below use the defaults)"), Settings()
    where = paths.settings_file if paths.settings_file.exists() else "defaults, no settings.json"
    return ok("settings", f"valid ({where})"), settings


def check_home_writable(paths: Paths) -> CheckResult:
    for folder in dict.fromkeys((paths.data_dir, paths.config_dir, paths.log_dir)):
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
                pass
        except OSError as exc:
            return fail("home folder", f"cannot write in {folder}: {exc.strerror or exc}. "
                        "Fix its permissions, or point CADRE_DESKTOP_HOME at a folder you own.")
    return ok("home folder", f"writable ({paths.data_dir})")


#: What a box with no desktop (no Secret Service on a session bus) can do, said after "no keyring".
HEADLESS_KEYRING = (
    " On a box with no desktop: `./scripts/run --headless` offers GNOME Keyring in a D-Bus session of"
    " its own (it installs gnome-keyring and dbus and asks for the keyring's password); or install them"
    " yourself and start the host as the README's \"A box with no desktop\" says. A keyring in a file"
    " (keyrings.alt's) is used only when you name it in PYTHON_KEYRING_BACKEND, never by itself."
)


def keyring_advice(code: str, platform: str = sys.platform) -> str:
    """What to do beyond the keyring's own words: on Linux, with no keyring at all, the headless way."""
    return HEADLESS_KEYRING if code == "keyring_unavailable" and platform.startswith("linux") else ""


def check_keyring(make_store: Callable[[], Any] | None = None, platform: str = sys.platform) -> CheckResult:
    from cadre_desktop.host.core.vault.secrets import SecretStore

    store = (make_store or SecretStore)()
    try:
        backend = store.check_sync()
    except CadreError as exc:
        return fail("keyring", exc.message + keyring_advice(exc.code, platform))
    except Exception as exc:  # a backend failing in a way nobody planned for
        return fail("keyring", f"the keyring failed a test write: {type(exc).__name__}")
    finally:
        store.close()
    return ok("keyring", f"a secret can be stored and deleted ({backend})")


def free_ports(settings: Settings, is_free: Callable[[str, int], bool] | None = None) -> list[int]:
    from cadre_desktop.host import drivers

    is_free = is_free or drivers.free_port
    low, high = settings.port_range
    found = []
    for port in range(low, high + 1):
        try:
            if is_free(settings.bind_host, port):
                found.append(port)
        except OSError:
            continue
    return found


def check_ports(settings: Settings, is_free: Callable[[str, int], bool] | None = None,
                bind_check: Callable[[str, str], None] | None = None) -> CheckResult:
    """Room for nodes in 'port_range' on 'bind_host'; first, that 'bind_host' is an address of
    this computer at all (the host's own preflight words): else every port looks taken."""
    from cadre_desktop.host.core.records.preflight import check_bind_host

    try:
        (bind_check or check_bind_host)(settings.bind_host, "settings.json")
    except CadreError as exc:
        return fail("ports", exc.message)
    low, high = settings.port_range
    free = free_ports(settings, is_free)
    span = f"{low}-{high} on {settings.bind_host}"
    if len(free) < 2:
        return fail("ports", f"{len(free)} free port(s) in {span}; a node needs 2. "
                    "Stop what uses them, or change 'port_range' in settings.json.")
    return ok("ports", f"{len(free)} of {high - low + 1} free in {span} (room for {len(free) // 2} node(s))")


def _status(port: int) -> dict | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/status", timeout=1.0) as resp:
            doc = json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return doc if isinstance(doc, dict) else None


def check_node_program(settings: Settings, timeout: float = NODE_START_TIMEOUT_S) -> CheckResult:
    """Start the node program as the host would (the same environment builder), wait until it
    answers /status, stop it as the host would (terminate, a grace period, kill)."""
    from cadre_desktop.host.drivers import TrialStart

    name = "node program"
    ports = free_ports(settings.with_changes(bind_host="127.0.0.1"))[:2]
    if len(ports) < 2:
        return fail(name, "not tried: no two free ports in 'port_range'")
    with tempfile.TemporaryDirectory(prefix="cadre-doctor-") as tmp:
        log_path = Path(tmp) / "doctor-node.log"
        started = time.monotonic()
        try:
            with open(log_path, "wb") as log:
                trial = TrialStart(settings.node_command, Path(tmp), (ports[0], ports[1]), log)
        except OSError as exc:
            return fail(name, f"cannot start {settings.node_command[0]!r}: {exc.strerror or exc}. "
                        "Check 'node_command' in settings.json.")
        try:
            return _until_it_answers(trial.child, trial.node_id, ports[0], log_path, started, timeout)
        finally:
            trial.end(grace_s=5.0)


def _until_it_answers(child: subprocess.Popen[bytes], node_id: str, port: int, log_path: Path, started: float,
                      timeout: float) -> CheckResult:
    """Until the node started answers for itself (its /status names `node_id`): an answer on the
    port from another program (a port taken after it was found free) is no answer of the node's."""
    name = "node program"
    stranger = False
    while time.monotonic() < started + timeout:
        status = _status(port)
        if status is not None and status.get("node_id") != node_id:
            stranger, status = True, None
        if status is not None:
            took = time.monotonic() - started
            return ok(name, f"started and answered in {took:.1f} s "
                      f"(state {status.get('state')}, version {status.get('version')})")
        code = child.poll()
        if code is not None:
            lines = logtail.last_lines(log_path, 3, max_bytes=64 * 1024)
            tail = " | ".join(line.strip() for line in lines if line.strip())
            return fail(name, f"exited with code {code} before answering"
                        + (f": {tail}" if tail else "") + ". Check 'node_command' in settings.json.")
        time.sleep(0.1)
    return fail(name, f"did not answer GET /status within {timeout:.0f} s"
                + (f" (another program answered on its port {port})" if stranger else ""))


def check_host(paths: Paths) -> CheckResult:
    from cadre_desktop.cli.client import ControlClient, NoHost
    from cadre_desktop.errors import ApiError

    try:
        info = ControlClient.from_file(paths.control_file).host_info()
    except NoHost:
        return CheckResult("host", Outcome.INFO, "no host is running for this home", required=False)
    except ApiError as exc:
        return CheckResult("host", Outcome.WARN, f"a host is registered but did not answer: {exc.message}",
                           required=False)
    return CheckResult("host", Outcome.INFO, f"running (pid {info.get('pid')}, version {info.get('version')})",
                       required=False)


def check_caps(settings: Settings, caps_words: Callable[[], dict[str, str | bool]] | None = None) -> CheckResult:
    """How this computer holds a node to its caps (the driver's `drivers.caps_words`), and the host's defaults."""
    from cadre_desktop.host import drivers

    try:
        seen = caps_words() if caps_words else drivers.caps_words(driver=settings.driver)
    except Exception as exc:  # a check reports, never crashes
        return CheckResult("caps", Outcome.WARN, f"could not tell how caps are enforced here: {exc}", False)
    defaults = (f"default cpu {settings.node_cpu_percent or 'not capped'}"
                f"{' %' if settings.node_cpu_percent else ''}, memory "
                f"{f'{settings.node_memory_mb} MB' if settings.node_memory_mb else 'not capped'}, "
                f"{'low' if settings.node_low_priority else 'normal'} priority")
    if seen["enforced"]:
        return ok("caps", f"enforced by the OS: {seen['how']} ({defaults})", False)
    return CheckResult("caps", Outcome.WARN, f"{seen['how']} ({defaults})", False)


def check_driver(settings: Settings, checks: Callable[[Settings], list[tuple[str, bool | None, str]]] | None = None,
                 ) -> list[CheckResult]:
    """Which driver runs the nodes and whether it can here (systemd: its user manager, and lingering)."""
    from cadre_desktop.host import drivers

    results = []
    for name, fine, words in (checks or drivers.driver_checks)(settings):
        results.append(CheckResult(name, Outcome.INFO, words, False) if fine is None else
                       ok(name, words) if fine else fail(name, words))
    return results


def check_lend_api(paths: Paths, settings: Settings, is_free: Callable[[str, int], bool] | None = None,
                   grants: Callable[[], list[dict]] | None = None) -> CheckResult:
    """Can borrowers reach this host: the running host's lend API listens, or why not; with no
    host, whether 'lend_port' is free for it. Informs only: lending is optional."""
    from cadre_desktop.cli.client import ControlClient, NoHost
    from cadre_desktop.errors import ApiError
    from cadre_desktop.text import one_line

    name, where = "lend API", f"{settings.bind_host}:{settings.lend_port}"
    try:
        listed = grants() if grants is not None else ControlClient.from_file(paths.control_file).list_grants()
    except (NoHost, ApiError):
        listed = None
    if listed is not None:
        active = [g for g in listed if g.get("status") == "active"]
        if not active:
            return CheckResult(name, Outcome.INFO, f"closed: no grant is active (it would listen on {where})", False)
        lend_api = active[0].get("lend_api") or {}
        if lend_api.get("listening"):
            return ok(name, f"listening on {one_line(lend_api.get('address'), 80)} for "
                      f"{len(active)} active grant(s)", False)
        words = active[0].get("unreachable") or f"the lend API is not listening on {where}"
        return CheckResult(name, Outcome.WARN, one_line(words, 400), False)
    from cadre_desktop.host import drivers

    is_free = is_free or drivers.free_port
    try:
        free = is_free(settings.bind_host, settings.lend_port)
    except OSError as exc:
        return CheckResult(name, Outcome.WARN, f"cannot try {where}: {exc.strerror or exc}", False)
    if not free:
        return CheckResult(name, Outcome.WARN, f"{where} is taken by another program: a grant would not be "
                           "reachable. Free the port, or change 'lend_port' in settings.json.", False)
    return ok(name, f"{where} is free for lending", False)


def check_fleet(paths: Paths, settings: Settings, fleet: Callable[[], dict] | None = None) -> list[CheckResult]:
    """The fleet: its port, and each paired computer's reachability, pinned key and clock difference
    (as the running host sees them). Informs only: a fleet is optional."""
    from cadre_desktop.cli.client import ControlClient, NoHost
    from cadre_desktop.errors import ApiError
    from cadre_desktop.text import one_line

    where = f"{settings.bind_host}:{settings.fleet_port}"
    try:
        doc = fleet() if fleet is not None else ControlClient.from_file(paths.control_file).request("GET", "/api/fleet")
    except (NoHost, ApiError):
        return [CheckResult("fleet", Outcome.SKIPPED, "no host is running for this home: the fleet is not checked", False)]
    rows = [c for c in doc.get("computers", []) if isinstance(c, dict)]
    me = next((c for c in rows if c.get("self")), {})
    peers = [c for c in rows if not c.get("self")]
    if not peers:
        return [CheckResult("fleet", Outcome.INFO, f"not paired with another computer (the link would listen on {where})", False)]
    port = ok("fleet port", f"listening on {where}", False) if me.get("listening") else \
        CheckResult("fleet port", Outcome.WARN, f"the fleet link is not listening on {where}: see the host's log", False)
    results = [port]
    for c in peers:
        name = f"computer {one_line(c.get('name'), 64)} ({one_line(c.get('id'), 20)})"
        key = f"key {one_line(c.get('fingerprint'), 80)[:23]}…"
        if c.get("state") != "online":
            since = one_line(c.get("unreachable_since") or c.get("last_seen") or "start", 40)
            results.append(CheckResult(name, Outcome.WARN, f"{one_line(c.get('state'), 20)} since {since}; {key}", False))
            continue
        offset = c.get("clock_offset_ms")
        clock = f"clock {offset:+.0f} ms" if isinstance(offset, (int, float)) else "clock not known"
        far = isinstance(offset, (int, float)) and abs(offset) > 2000
        results.append(CheckResult(name, Outcome.WARN if far else Outcome.OK,
                                   f"online at {one_line(c.get('address'), 80)}; {key}; {clock}"
                                   + ("; set this computer's clock (NTP)" if far else ""), False))
    return results


ETCD_VERSION_TIMEOUT_S = 10.0


def check_etcd(settings: Settings, run: Callable[[list[str]], subprocess.CompletedProcess[str]] | None = None) -> CheckResult:
    """The etcd program this computer's member would run (moves and failover need one); asked
    for its version, bounded. Informs only: a fleet is optional."""
    from cadre_desktop.host.fleetstate.errors import EtcdNotFound
    from cadre_desktop.host.fleetstate.member import etcd_command
    from cadre_desktop.text import one_line

    name = "etcd"
    if settings.fleet_etcd_endpoints:
        where = ", ".join(one_line(e, 80) for e in settings.fleet_etcd_endpoints[:3])
        return CheckResult(name, Outcome.INFO, f"the fleet uses an existing cluster ({where}): no member runs here", False)
    try:
        command = etcd_command(settings.etcd_command)
    except EtcdNotFound as exc:
        return CheckResult(name, Outcome.WARN, f"{exc}; without one a fleet has no moves and no failover", False)
    shown = one_line(command[0], 200)
    try:
        done = (run or _run_version)([*command, "--version"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = "it did not answer --version in time" if isinstance(exc, subprocess.TimeoutExpired) else \
            one_line(exc.strerror or str(exc), 120)
        return CheckResult(name, Outcome.WARN, f"{shown} cannot be run: {why}. Check 'etcd_command' in settings.json.", False)
    version = next((line.split(":", 1)[1].strip() for line in done.stdout.splitlines()
                    if line.startswith("etcd Version:")), "")
    if done.returncode != 0 or not version:
        return CheckResult(name, Outcome.WARN, f"{shown} is not an etcd that answers --version (exit {done.returncode})."
                           " Check 'etcd_command' in settings.json.", False)
    return ok(name, f"etcd {one_line(version, 40)} at {shown}", False)


def _run_version(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=ETCD_VERSION_TIMEOUT_S, errors="replace")


def has_display(env: Mapping[str, str] | None = None, platform: str = sys.platform) -> bool:
    env = os.environ if env is None else env
    return platform in ("win32", "darwin") or bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def display_probe_command(frozen: bool | None = None) -> list[str]:
    """A bundle has no `-m`: it runs the probe through its own hidden entry."""
    frozen = getattr(sys, "frozen", False) if frozen is None else frozen
    if frozen:
        return [sys.executable, "--probe-display"]
    return [sys.executable, "-m", "cadre_desktop.ui.probe_display"]


def probe_display(timeout: float = DISPLAY_PROBE_TIMEOUT_S) -> dict:
    """Ask Qt in a child process: a display Qt cannot open aborts the process that tries."""
    done = subprocess.run(display_probe_command(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"Qt exited with code {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


NOTIFY_PROBE_TIMEOUT_S = 5.0


async def _service_capabilities() -> frozenset[str]:
    from desktop_notifier import DesktopNotifier

    notifier = DesktopNotifier(app_name="cadre-desktop")
    try:
        async with asyncio.timeout(NOTIFY_PROBE_TIMEOUT_S):
            return frozenset(c.name for c in await notifier.get_capabilities())
    finally:
        bus = getattr(getattr(notifier, "_backend", None), "bus", None)
        if bus is not None:
            bus.disconnect()


def probe_notifications() -> frozenset[str] | None:
    """What the desktop's notification service can do, asked as the app asks it (desktop-notifier:
    org.freedesktop.Notifications on the session bus on Linux); None when no service answers."""
    try:
        return asyncio.run(_service_capabilities()) or None
    except Exception:  # no session bus, no service, one that hangs: the app falls back to the tray
        return None


def notification_result(capabilities: frozenset[str] | None, balloon: bool) -> CheckResult:
    """The notifications line: the service the app uses first, Qt's tray balloon only as its fallback."""
    if capabilities is not None and "TITLE" in capabilities:
        if "BUTTONS" in capabilities:
            return ok("notifications", "the desktop's notification service answers, with buttons (Retry)", False)
        return ok("notifications", "the desktop's notification service answers, without buttons: "
                  "open the window to retry a node", False)
    if balloon:
        return CheckResult("notifications", Outcome.WARN, "no notification service answers; the tray's "
                           "balloon shows them instead, without a Retry button", False)
    return CheckResult("notifications", Outcome.WARN, "no notification service answers and the tray cannot "
                       "show messages; you will not be told when the host gives up on a node", False)


def check_desktop(probe: Callable[[], dict] = probe_display, env: dict[str, str] | None = None,
                  platform: str = sys.platform,
                  notifications: Callable[[], frozenset[str] | None] = probe_notifications) -> list[CheckResult]:
    if not has_display(env, platform):
        why = "no display (DISPLAY and WAYLAND_DISPLAY are unset); the headless host does not need one"
        return [CheckResult("tray", Outcome.SKIPPED, why, False),
                CheckResult("notifications", Outcome.SKIPPED, why, False)]
    try:
        found = probe()
    except Exception as exc:
        # Qt fails in ways nobody lists (no display, a broken plugin); a check reports it, never crashes.
        why = f"Qt could not open the display: {exc}"
        return [CheckResult("tray", Outcome.WARN, why, False),
                CheckResult("notifications", Outcome.WARN, why, False)]
    tray = (ok("tray", "a system tray is available", False) if found.get("tray") else
            CheckResult("tray", Outcome.WARN, "no system tray; on GNOME install the AppIndicator "
                        "extension, or run `cadre-desktop --headless`", False))
    return [tray, notification_result(notifications(), bool(found.get("messages")))]


def main(paths: Paths, out=None) -> int:
    """Print a line per check as it finishes; 0 if every required check passed."""
    out = out or sys.stdout
    failed = False
    settings_result, settings = check_settings(paths)
    checks: list[Callable[[], CheckResult | list[CheckResult]]] = [
        lambda: settings_result,
        lambda: check_home_writable(paths),
        check_keyring,
        lambda: check_ports(settings),
        lambda: check_node_program(settings),
        lambda: check_driver(settings),
        lambda: check_caps(settings),
        lambda: check_host(paths),
        lambda: check_lend_api(paths, settings),
        lambda: check_fleet(paths, settings),
        lambda: check_etcd(settings),
        check_desktop,
    ]
    for check in checks:
        results = check()
        for result in results if isinstance(results, list) else [results]:
            print(result.line(), file=out, flush=True)
            failed = failed or result.failed
    return 1 if failed else 0
