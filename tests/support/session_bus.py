"""A private D-Bus session with an unlocked GNOME Keyring: a real Secret Service for tests.

Started once per test module (`secret_service` in tests/conftest.py; `private_secret_service`
once per test); every host the tests spawn gets its address in DBUS_SESSION_BUS_ADDRESS, so
claim secrets go through the same keyring path a Linux desktop uses.

Once per module, not once per run: gnome-keyring (42, Debian 12) aborts under the suite's
traffic when it has lived long. It rewrites its whole keyring file at every change, so one
that kept every secret of a run got slower at each write, and concurrent writes to a big one
made it abort (SIGABRT, reproduced: four writers, ~400 items); emptied instead, it reused the
object paths of deleted items ("asked to register item .../166, but it's already registered")
and aborted in GLib (`invoke_get_property_in_idle_cb: assertion failed`). Both happened in
side-by-side runs, and every later test that needed the keyring failed. A fresh daemon per
module holds one module's secrets and never reuses a path. Its stderr is kept in its folder
(`keyring.log`), and `check_alive` says how it ended.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from tests.support.polling import wait_until


def _replacement_on_demand(data: Path, log: Path) -> None:
    """A keyring the bus starts, unlocked, when one is asked for and none runs: gnome-keyring 42
    aborts when a client goes away in the middle of a call (GLib's invoke_get_property_in_idle_cb,
    seen when crash tests SIGKILL a host), and the machine's own service file would start one that
    is locked, so every call after it failed. The bus looks in $XDG_DATA_HOME/dbus-1/services
    first; the password is the session's, so the same login keyring (its file) opens again."""
    services = data / "dbus-1" / "services"
    services.mkdir(parents=True)
    command = ("printf %s test-keyring-password | exec gnome-keyring-daemon --foreground --unlock "
               f"--components=secrets 2>>{log}")
    (services / "org.freedesktop.secrets.service").write_text(
        f"[D-BUS Service]\nName=org.freedesktop.secrets\nExec=/bin/sh -c '{command}'\n")


@contextmanager
def running_secret_service() -> Iterator[dict[str, str]]:
    """The environment of a started SecretServiceSession, stopped at the end whatever happened.

    What the `secret_service` (one per test session) and `private_secret_service` (one per
    test) fixtures in tests/conftest.py both are.
    """
    session = SecretServiceSession()
    try:
        yield session.start()
    finally:
        session.stop()


@contextmanager
def running_session() -> Iterator[SecretServiceSession]:
    """`running_secret_service`, handing over the session itself (`check_alive`)."""
    session = SecretServiceSession()
    try:
        session.start()
        yield session
    finally:
        session.stop()


class SecretServiceSession:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cadre-dbus-"))
        self.env: dict[str, str] = {}
        self._procs: list[subprocess.Popen] = []
        self._keyring: subprocess.Popen | None = None

    def start(self) -> dict[str, str]:
        for tool in ("dbus-daemon", "gnome-keyring-daemon"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is missing; ./scripts/test installs it (dbus, gnome-keyring)")
        runtime = self.root / "run"
        runtime.mkdir(mode=0o700)
        data = self.root / "data"
        data.mkdir()
        _replacement_on_demand(data, self.root / "keyring.log")
        # What the bus starts on demand (the accessibility bus's launcher, dconf) gets this session's
        # folders, not the machine's: with HOME's, every suite's at-spi launcher put its bus at the one
        # ~/.cache/at-spi/bus, and a GTK panel of one suite waited 25 s on another suite's.
        private = {"HOME": str(self.root), "XDG_RUNTIME_DIR": str(runtime), "XDG_DATA_HOME": str(data),
                   "XDG_CACHE_HOME": str(self.root / "cache"), "XDG_CONFIG_HOME": str(self.root / "config")}
        bus = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1",
             f"--address=unix:path={runtime}/bus"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, **private},
        )
        self._procs.append(bus)
        assert bus.stdout is not None
        address = bus.stdout.readline().strip()
        if not address:
            raise RuntimeError("dbus-daemon did not start")
        self.env = {
            "DBUS_SESSION_BUS_ADDRESS": address,
            "XDG_RUNTIME_DIR": str(runtime),
            "XDG_DATA_HOME": str(data),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.SecretService.Keyring",
        }
        self._keyring = self._start_keyring()
        return self.env

    def _start_keyring(self) -> subprocess.Popen:
        env = {**os.environ, **self.env, "HOME": str(self.root)}
        with open(self.root / "keyring.log", "ab") as log:
            keyring = subprocess.Popen(
                ["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, env=env,
            )
        assert keyring.stdin is not None
        keyring.stdin.write(b"test-keyring-password")
        keyring.stdin.close()
        self._procs.append(keyring)
        wait_until(lambda: self._keyring_answers(env), timeout=20, interval=0.1, what="gnome-keyring on D-Bus")
        return keyring

    def check_alive(self) -> None:
        """AssertionError, with its exit and the end of its log, if its keyring no longer answers
        (its gnome-keyring-daemon ended and no replacement came up on demand): the tests that
        failed for want of it are then explained."""
        assert self._keyring is not None, "check_alive() before start()"
        code = self._keyring.poll()
        if code is None or self._keyring_answers({**os.environ, **self.env, "HOME": str(self.root)}):
            return
        raise AssertionError(f"the session's gnome-keyring-daemon exited ({code}) and none answers: "
                             f"{(self.root / 'keyring.log').read_text(errors='replace')[-2000:]}")

    @staticmethod
    def _keyring_answers(env) -> bool:
        probe = (
            "import keyring\n"
            "keyring.set_password('cadre-desktop-test', 'probe', 'x')\n"
            "assert keyring.get_password('cadre-desktop-test', 'probe') == 'x'\n"
        )
        import sys
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=20).returncode == 0

    def stop(self) -> None:
        # What the bus started on demand goes too: a second gnome-keyring-daemon the bus activated
        # (a client asked for the Secret Service while the test's own was starting or gone) outlived
        # its bus, one stray per such test, and every run of the suite left more.
        started = self._activated()
        for proc in reversed(self._procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        # The bus starts a replacement detached (init is its parent, not the bus), so the look
        # above never finds it, and one that came while the session stopped was started after it.
        # Its command names this session's folder (its log), which no other session's does.
        started += [p for p in self._replacements() if p.pid not in {c.pid for c in started}]
        for child in started:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _gone, alive = psutil.wait_procs(started, timeout=5)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        keep = os.environ.get("CADRE_TEST_KEYRING_LOGS")  # where a run that hunts a keyring failure keeps them
        log = self.root / "keyring.log"
        if keep and log.exists() and log.stat().st_size:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, Path(keep) / f"{self.root.name}.log")
        shutil.rmtree(self.root, ignore_errors=True)

    def _replacements(self) -> list[psutil.Process]:
        """The replacement keyrings the bus started for this session (`_replacement_on_demand`), and theirs."""
        mark, found = str(self.root), []
        for proc in psutil.process_iter(["cmdline"]):
            if any(mark in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
                with contextlib.suppress(psutil.Error):
                    found.extend(proc.children(recursive=True))
        return found

    def _activated(self) -> list[psutil.Process]:
        """Every process the bus (or the keyring) started, found before they are stopped."""
        found: list[psutil.Process] = []
        for proc in self._procs:
            with contextlib.suppress(psutil.Error):
                found.extend(psutil.Process(proc.pid).children(recursive=True))
        return found


def bus_clients(env: dict) -> int:
    """How many connections the session bus has now, not counting the one that asks."""
    from contextlib import closing

    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    with closing(open_dbus_connection(bus=env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        names = conn.send_and_get_reply(message_bus.ListNames()).body[0]
        return sum(1 for name in names if name.startswith(":") and name != conn.unique_name)


def lock_default_collection(keyring_env: dict) -> None:
    """Lock the login collection, as at the start of a session before the user unlocks it."""
    from contextlib import closing

    import secretstorage
    from jeepney.io.blocking import open_dbus_connection

    with closing(open_dbus_connection(bus=keyring_env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        collection = secretstorage.get_default_collection(conn)
        collection.lock()
        assert collection.is_locked()


def unlock_default_collection(keyring_env: dict, password: bytes = b"test-keyring-password") -> None:
    """Unlock it again with its password and no prompt (what typing it into the unlock prompt does).

    gnome-keyring's own D-Bus method for this takes the password as a Secret
    Service secret, over a `plain` session opened on the same connection.
    """
    from contextlib import closing

    import secretstorage
    from jeepney import DBusAddress, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    with closing(open_dbus_connection(bus=keyring_env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                              interface="org.freedesktop.Secret.Service")
        reply = conn.send_and_get_reply(new_method_call(service, "OpenSession", "sv", ("plain", ("s", ""))))
        session_path = reply.body[1]
        collection = secretstorage.get_default_collection(conn)
        internal = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                               interface="org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface")
        conn.send_and_get_reply(new_method_call(internal, "UnlockWithMasterPassword", "o(oayays)",
                                                (collection.collection_path,
                                                 (session_path, b"", password, "text/plain"))))
        assert not collection.is_locked()
