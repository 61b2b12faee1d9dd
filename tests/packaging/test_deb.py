"""The Debian package: what it declares, lintian's verdict, and a real install with apt-get.

Built once per session from the session's bundle (fixture `deb`, packaging/build-deb.sh).
Installing, using and removing it needs root and apt-get: those tests are skipped
without them (a developer running the suite as a user); .ci/run runs as root.
The package goes onto this machine, so the module removes it again whatever happens.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cadre_desktop import __version__
from tests.support.bundle import APP, REPO, BundledHost, clean_env, loopback_settings
from tests.support.host_calls import claim
from tests.support.polling import wait_until

# The first test to ask for `deb` may build the bundle too; pytest-timeout counts fixtures.
pytestmark = pytest.mark.timeout(900)

OPT = Path("/opt") / APP
COMMAND = Path("/usr/bin") / APP
SYSTEM_PATH = "/usr/bin:/bin"  # no venv, no /usr/local: the command must come from the package
#: Where a file of ours could be left behind, and the name patterns that would be ours.
LEFTOVER_GLOBS = ["/opt/cadre-desktop", "/usr/bin/cadre-desktop", "/usr/share/applications/cadre-desktop.*",
                  "/usr/share/icons/hicolor/*/apps/cadre-desktop.*", "/usr/share/metainfo/org.cadre.desktop.*",
                  "/usr/share/doc/cadre-desktop", "/usr/share/lintian/overrides/cadre-desktop",
                  "/var/lib/dpkg/info/cadre-desktop.*", "/etc/**/*cadre*"]


def tool(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout,
                          env=env)


def apt_get(*args: str) -> subprocess.CompletedProcess:
    # Another apt-get (a set-up script) may hold the lock for a while: wait for it, do not fail.
    return tool("apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", *args,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def package_status() -> str | None:
    """dpkg's status of our package ("install ok installed", ...), None when dpkg knows nothing of it."""
    done = tool("dpkg-query", "-W", "-f=${Status}", APP)
    return done.stdout.strip() if done.returncode == 0 else None


def field(deb: Path, name: str) -> str:
    return tool("dpkg-deb", "--field", str(deb), name).stdout.strip()


def package_names(relation: str) -> set[str]:
    """Every package a Depends/Recommends field names, alternatives included, without versions."""
    return {alt.split()[0].split(":")[0] for item in relation.split(",") for alt in item.split("|") if alt.strip()}


def unbundled_needs(folder: Path) -> dict[str, str]:
    """soname -> a file that needs it, for the libraries the bundle's binaries need and do not carry."""
    carried = {p.name for p in folder.rglob("*.so*")}
    needs: dict[str, str] = {}
    for path in [folder / APP, *folder.rglob("*.so*")]:
        if path.is_symlink() or not path.is_file():
            continue
        dump = tool("objdump", "-p", str(path), timeout=60).stdout
        for soname in re.findall(r"^\s+NEEDED\s+(\S+)$", dump, re.MULTILINE):
            if soname not in carried:
                needs.setdefault(soname, path.name)
    return needs


def owners(soname: str) -> set[str]:
    done = tool("dpkg", "-S", f"*/{soname}")
    return {line.split(":")[0] for line in done.stdout.splitlines() if ": " in line}


def leftovers() -> list[str]:
    return sorted({str(p) for pattern in LEFTOVER_GLOBS for p in Path("/").glob(pattern.lstrip("/"))})


def test_package_depends_on_exactly_the_system_libraries_the_bundle_does_not_carry(deb, bundle):
    assert field(deb, "Package") == APP and field(deb, "Version") == f"{__version__}-1"
    assert field(deb, "Architecture") == tool("dpkg", "--print-architecture").stdout.strip()
    depends = package_names(field(deb, "Depends"))
    needs = unbundled_needs(bundle.parent)
    assert {"libxcb.so.1", "libGL.so.1", "libc.so.6"} <= needs.keys()  # Qt's xcb plugin and everything
    for soname, user in needs.items():
        found = owners(soname)
        assert found, f"no installed package has {soname} (needed by {user})"
        assert found & depends, f"{soname} (needed by {user}, in {found}) is not in Depends: {sorted(depends)}"
    # And nothing the bundle carries itself: those would be dependencies for nothing.
    for carried in ("libfontconfig.so.1", "libxkbcommon.so.0", "libX11.so.6", "libdbus-1.so.3"):
        assert not owners(carried) & depends, carried
    recommends = field(deb, "Recommends")
    assert "gnome-keyring" in package_names(recommends) and "gnome-keyring" not in depends


def test_building_without_a_bundle_says_to_build_one_first(tmp_path):
    done = tool("bash", str(REPO / "packaging" / "build-deb.sh"), "--bundle", str(tmp_path / "none"),
                "--out", str(tmp_path), timeout=60)
    assert done.returncode == 1 and "no Linux bundle" in done.stderr and "packaging/build.sh first" in done.stderr
    assert not list(tmp_path.glob("*.deb"))


def test_lintian_finds_no_error_in_the_package(deb):
    if shutil.which("lintian") is None:
        pytest.fail("lintian is missing: ./scripts/test installs it")
    done = tool("lintian", "--tag-display-limit", "0", str(deb))
    errors = [line for line in done.stdout.splitlines() if line.startswith("E: ")]
    # Exit 0: it ran and found no error (warnings are fine; 1 is errors, 2 is lintian failing).
    assert done.returncode == 0 and not errors, done.stdout + done.stderr


@pytest.fixture(scope="module")
def apt_machine():
    """A machine this module may install the package on; it purges it again at the end."""
    if not sys.platform.startswith("linux") or not (shutil.which("apt-get") and shutil.which("dpkg-query")):
        pytest.skip("installing the .deb needs apt-get and dpkg (Debian or Ubuntu)")
    if os.geteuid() != 0:
        pytest.skip("installing the .deb needs root for apt-get; .ci/run runs as root")
    # The package is the machine's, not the suite's: a second suite running beside this one waits
    # for it (a few seconds from install to purge) instead of finding it installed and skipping.
    with open(APT_LOCK, "a") as lock:
        wait_until(lambda: _locked(lock), timeout=90, interval=0.2, what="another suite's .deb tests")
        if package_status() is not None:
            pytest.skip(f"a {APP} package is already on this machine, which the test would replace and remove "
                        f"(`apt-get purge {APP}` first)")
        try:
            yield
        finally:
            if package_status() is not None:
                apt_get("purge", APP)


#: The one file every suite on this machine locks while its package is installed.
APT_LOCK = Path("/tmp/cadre-desktop-tests-apt.lock")


def _locked(lock) -> bool:
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@pytest.fixture
def installed(apt_machine, deb) -> Path:
    """The package installed by `apt-get install ./x.deb`; the command on the PATH."""
    if package_status() != "install ok installed":
        done = apt_get("install", str(deb))  # a path (it has a slash): apt installs the file, not a name
        assert done.returncode == 0, done.stdout + done.stderr
    return COMMAND


def test_install_puts_the_app_in_opt_with_a_command_menu_entry_icon_and_metainfo(installed):
    assert installed.is_symlink() and installed.resolve() == OPT / APP
    assert shutil.which(APP, path=SYSTEM_PATH) == str(COMMAND)
    entry = Path("/usr/share/applications") / f"{APP}.desktop"
    lines = entry.read_text().splitlines()
    assert "Exec=cadre-desktop" in lines and "Icon=cadre-desktop" in lines  # both resolve through the system
    assert tool("desktop-file-validate", str(entry)).returncode == 0
    hicolor = Path("/usr/share/icons/hicolor")
    assert (hicolor / "scalable" / "apps" / f"{APP}.svg").is_file()
    assert (hicolor / "48x48" / "apps" / f"{APP}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metainfo = Path("/usr/share/metainfo/org.cadre.desktop.metainfo.xml")
    checked = tool("appstreamcli", "validate", "--no-net", str(metainfo))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"<launchable type=\"desktop-id\">{APP}.desktop</launchable>" in metainfo.read_text()
    # The fleet's etcd is a program of the package too (0644 like the libraries, it would never run).
    etcd = OPT / "_internal" / "etcdbin" / "etcd"
    ran = tool(str(etcd), "--version", timeout=60, env=clean_env(PATH=SYSTEM_PATH))
    assert ran.returncode == 0 and ran.stdout.startswith("etcd Version: 3."), ran.stdout + ran.stderr
    # Root's, and nobody else may change them.
    for path in [OPT / APP, etcd, entry, metainfo, *(p for p in OPT.glob("_internal/*.so*") if not p.is_symlink())]:
        info = path.lstat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o022) == (0, 0, 0), path


def test_installed_command_tells_its_version_and_commit_and_its_doctor_finds_all_well(installed, bundle,
                                                                                       secret_service, tmp_path):
    env = clean_env(PATH=SYSTEM_PATH)
    version = tool(APP, "--version", env=env, timeout=60)
    built = tool(str(bundle), "--version", env=env, timeout=60).stdout.strip()
    assert (version.returncode, version.stdout.strip()) == (0, built), version.stderr
    assert re.fullmatch(rf"{APP} {re.escape(__version__)} \(commit [0-9a-f]{{7,40}}(-dirty)?\)", built)

    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(loopback_settings()))
    keyring_env = {k: v for k, v in secret_service.items() if k != "PYTHON_KEYRING_BACKEND"}
    doctor = tool(APP, "doctor", env=clean_env(**keyring_env, PATH=SYSTEM_PATH, CADRE_DESKTOP_HOME=str(home)),
                  timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert re.search(r"^ok\s+keyring: .*SecretService", doctor.stdout, re.MULTILINE), doctor.stdout
    assert re.search(rf"^ok\s+node program: .*version {re.escape(__version__)}", doctor.stdout, re.MULTILINE)
    assert re.search(rf"^ok\s+etcd: etcd 3\.5\.\d+ at {OPT}/_internal/etcdbin/etcd$", doctor.stdout, re.MULTILINE), doctor.stdout


def test_installed_headless_host_runs_a_node_that_a_phone_claims(installed, secret_service, tmp_path):
    host = BundledHost(installed, tmp_path / "home", {**secret_service, "PATH": SYSTEM_PATH})
    try:
        host.start()
        view = host.add_node("Kitchen")
        assert psutil.Process(view["pid"]).exe() == str(OPT / APP)  # the package's own node program
        status, body = claim(view, "family")  # as a phone does, from the claim URL the API gave
        assert status == 200, body
        joined = wait_until(lambda: (v := host.api("GET", f"/api/nodes/{view['id']}")[1])["status"] == "joined"
                            and v, timeout=30, what="the node joined")
        assert joined["cadre"] == "family" and joined["claim_url"] is None
        assert host.stop() == 0, host.stderr()
    finally:
        host.kill()


def test_apt_remove_leaves_nothing_of_ours_and_purge_has_nothing_left_to_do(installed):
    ours = tool("dpkg", "-L", APP).stdout.split()
    assert str(OPT / APP) in ours and str(COMMAND) in ours

    removed = apt_get("remove", APP)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    # Shared folders (/usr/share/icons/hicolor/48x48/apps) stay; every file and folder of ours goes.
    assert [p for p in ours if os.path.lexists(p) and (not os.path.isdir(p) or APP in p)] == []
    assert leftovers() == []
    # No conffiles, no maintainer scripts: dpkg forgets the package at once; purge finds nothing.
    assert package_status() is None
    purged = tool("dpkg", "--purge", APP)
    assert purged.returncode == 0 and package_status() is None and leftovers() == []
    cache = Path("/usr/share/icons/hicolor/icon-theme.cache")
    assert not cache.exists() or APP.encode() not in cache.read_bytes()  # the trigger rebuilt it without us
