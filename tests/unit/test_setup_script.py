"""scripts/_setup.sh says what it does, step by step, with progress (a first run took a
minute with two quiet lines). Run with stand-ins for dpkg-query, python3 and pip."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).parents[2]
FAKE_PYTHON = """#!/bin/sh
# python3 -m venv DIR makes DIR/bin/python, this same stand-in; pip install takes a while.
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit 0; fi
if [ "$3" = "install" ]; then sleep "${FAKE_PIP_S:-0}"; fi
exit 0
"""


#: Every package is installed but one named `missing-…`.
DPKG_QUERY = """#!/bin/sh
for last; do :; done
case "$last" in missing-*) exit 1;; esac
echo 'install ok installed'
"""


def run_setup(tmp_path: Path, pip_s: str = "0", packages: str = "python3-venv libgl1") -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("dpkg-query", DPKG_QUERY), ("python3", FAKE_PYTHON), ("apt-get", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # As scripts/run and scripts/test source it: under errexit (regression: the ticker's end, a
    # kill that `wait` reports as 143, ended every set-up there, CI's included).
    script = (f'set -euo pipefail; source {REPO / "scripts" / "_setup.sh"}; STEPS=4; VENV={tmp_path / "venv"}; TICK_S=1; '
              f"ensure_debs {packages}; ensure_venv run; step the app; "
              "echo second run >&2; STEP=0; ensure_debs libgl1; ensure_venv run; step the app")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_PIP_S": pip_s, "HOME": str(tmp_path),
                               # this machine's own apt locks are not the test's: CI ran an apt-get beside it
                               "APT_LOCKS": str(tmp_path / "no-such-lock")})
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_each_step_is_numbered_and_ends_with_its_time(tmp_path):
    lines = run_setup(tmp_path)
    first, second = lines[:lines.index("second run")], lines[lines.index("second run") + 1:]
    assert [line for line in first if line.startswith("[")] == [
        "[2/4] creating the virtualenv .venv",  # the packages were there: step 1 is silent, keeping its number
        "[3/4] installing cadre-desktop and its Python packages (run) into .venv (pip; a minute the first time)",
        "[4/4] the app"]
    assert any(re.fullmatch(r"\s+done: pip install \(\d+ s\)", line) for line in first)
    assert second == ["[4/4] the app"]  # everything there: nothing of set-up is said


def test_a_long_step_says_it_is_still_at_work(tmp_path):
    lines = run_setup(tmp_path, pip_s="2.5")
    assert any(re.fullmatch(r"\s+still: pip install \([12] s\)", line) for line in lines), lines


def test_missing_system_packages_are_named_and_installed_as_a_step(tmp_path):
    lines = run_setup(tmp_path, packages="libgl1 missing-libfoo")
    assert lines[0] == "[1/4] installing system packages (apt-get): missing-libfoo"
    assert re.fullmatch(r"\s+done: apt-get install \(\d+ s\)", lines[2]), lines


#: Holds a POSIX lock on argv[1] (as apt and dpkg hold theirs) for argv[2] seconds.
HOLD_LOCK = """import fcntl, sys, time
fh = open(sys.argv[1], "w")
fcntl.lockf(fh, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def install_with_apt_busy(tmp_path: Path, hold_s: float, wait_s: int) -> tuple[subprocess.CompletedProcess, int, Path]:
    """ensure_debs of a missing package while another process holds an apt lock for `hold_s`;
    what it said, the holder's pid, and the stand-in apt-get's record of its calls."""
    import sys

    bin_dir, calls, lock = tmp_path / "bin", tmp_path / "apt-calls", tmp_path / "lock-frontend"
    bin_dir.mkdir()
    for name, text in (("dpkg-query", DPKG_QUERY), ("apt-get", f'#!/bin/sh\necho "$@" >> {calls}\nexit 0\n')):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    lock.touch()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock), str(hold_s)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        script = f'set -euo pipefail; source {REPO / "scripts" / "_setup.sh"}; STEPS=4; TICK_S=1; ensure_debs missing-libfoo'
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
                                   "APT_LOCKS": f"{tmp_path / 'no-such-lock'} {lock}", "APT_WAIT_S": str(wait_s)})
    finally:
        holder.kill()
        holder.wait()
    return done, holder.pid, calls


def test_another_apt_holding_the_lock_is_waited_for_and_said(tmp_path):
    """Regression (issue 39): on a fresh machine at boot (unattended upgrades), set-up failed at once."""
    done, pid, calls = install_with_apt_busy(tmp_path, hold_s=2, wait_s=30)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert f"      waiting for another apt/dpkg (pid {pid}) to finish, up to 30 s …" in lines
    assert any(re.fullmatch(r"\s+done: waiting for another apt/dpkg \(\d+ s\)", line) for line in lines), lines
    assert lines.index(f"      waiting for another apt/dpkg (pid {pid}) to finish, up to 30 s …") < next(
        i for i, line in enumerate(lines) if "done: apt-get install" in line)
    update, install = calls.read_text().splitlines()
    assert update.startswith("-o DPkg::Lock::Timeout=30 update") and "install" in install and "missing-libfoo" in install


def test_an_apt_that_keeps_the_lock_past_the_wait_stops_set_up_in_words(tmp_path):
    done, pid, calls = install_with_apt_busy(tmp_path, hold_s=60, wait_s=2)
    assert done.returncode != 0
    assert f"another apt/dpkg (pid {pid}) still holds its lock after 2 s" in done.stderr
    assert not calls.exists()  # apt-get never ran into the lock


def headless_run(tmp_path: Path, keyring_check: int, env: dict[str, str] | None = None,
                 stdin: str = "") -> tuple[subprocess.CompletedProcess, Path]:
    """`scripts/run --headless` in a copy of the repo whose .venv has stand-ins: its python
    answers doctor's keyring check with `keyring_check` (3: it fails), its cadre-desktop records
    that it ran. What it said, and the record."""
    import shutil

    root, ran = tmp_path / "root", tmp_path / "host-ran"
    shutil.copytree(REPO / "scripts", root / "scripts")
    venv_bin = root / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (root / ".venv" / ".installed-run").touch()
    for name, text in (("python", f"#!/bin/sh\nexit {keyring_check}\n"),
                       ("cadre-desktop", f'#!/bin/sh\necho "$@" > {ran}\n')):
        (venv_bin / name).write_text(text)
        (venv_bin / name).chmod(0o755)
    done = subprocess.run(["bash", str(root / "scripts" / "run"), "--headless"], capture_output=True, text=True,
                          timeout=60, input=stdin,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **(env or {})})
    return done, ran


def test_headless_run_with_no_keyring_and_no_choice_stops_and_says_what_to_install(tmp_path):
    """Regression (issue 39): on a box with no Secret Service the host started, doctor failed the
    keyring, and nothing said what to install."""
    done, ran = headless_run(tmp_path, keyring_check=3)
    assert done.returncode == 2 and not ran.exists()
    assert "No keyring (Secret Service) answers on this machine" in done.stderr
    assert "installs gnome-keyring and dbus" in done.stderr and "CADRE_HEADLESS_KEYRING=gnome-keyring" in done.stderr
    assert "yourself in PYTHON_KEYRING_BACKEND" in done.stderr  # a file only by name


def test_headless_run_with_a_keyring_or_one_named_by_hand_starts_the_host_at_once(tmp_path):
    done, ran = headless_run(tmp_path / "a", keyring_check=0)
    assert done.returncode == 0 and ran.read_text() == "--headless\n" and "keyring" not in done.stderr.lower()
    named = {"PYTHON_KEYRING_BACKEND": "keyrings.alt.file.EncryptedKeyring"}
    done, ran = headless_run(tmp_path / "b", keyring_check=3, env=named)  # chosen: never second-guessed
    assert done.returncode == 0 and ran.read_text() == "--headless\n"


def test_headless_run_refuses_an_empty_keyring_password(tmp_path):
    done, ran = headless_run(tmp_path, keyring_check=3, env={"CADRE_HEADLESS_KEYRING": "gnome-keyring"}, stdin="\n")
    assert done.returncode == 2 and not ran.exists() and "no password given" in done.stderr
