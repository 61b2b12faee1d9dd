"""The test keyrings, one family: in memory for in-process tests, on file for subprocess hosts.

In memory (hand one to SecretStore): MemoryKeyring, which can be locked and unlocked
while a test runs; LockedKeyring (locked from the start, as when the user dismissed the
unlock prompt); BrokenKeyring (stores fail the way a broken D-Bus service does);
HangingKeyring (reads wait for an unlock prompt nobody answers).

On file, for a host or CLI in a subprocess: select FileKeyring with
PYTHON_KEYRING_BACKEND=tests.support.keyrings.FileKeyring and name the file in
CADRE_TEST_KEYRING_FILE (the repository root must be on the child's PYTHONPATH).
Entries are a JSON object "service\\nuser" -> secret, replaced atomically so a host and
a CLI can share it. FaultyKeyring (PYTHON_KEYRING_BACKEND=tests.support.keyrings.FaultyKeyring)
adds failures a test switches on and off while the host runs: CADRE_TEST_KEYRING_MODE
names a file holding the mode, `ok`; `raise` (a broken D-Bus service); `locked`
(keyring.errors.KeyringLocked); `gone` (keyring.errors.NoKeyringError).
Tests only: these keep secrets in plain text.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import keyring.errors
from keyring.backend import KeyringBackend

from cadre_desktop.files.atomicfile import write_json_atomic

FILE_ENV = "CADRE_TEST_KEYRING_FILE"
MODE_ENV = "CADRE_TEST_KEYRING_MODE"
LOCKED_WORDS = "Failed to unlock the collection!"  # what the Secret Service says


class MemoryKeyring(KeyringBackend):
    """In memory; counts every call, records the thread of each read and write.

    Set `locked` to make every call fail with KeyringLocked until it is cleared.
    """

    priority = 1

    def __init__(self, locked: bool = False):
        super().__init__()
        self.items: dict[tuple[str, str], str] = {}
        self.threads: set[str] = set()
        self.calls = 0
        self.locked = locked

    def _enter(self) -> None:
        self.calls += 1
        if self.locked:
            raise keyring.errors.KeyringLocked(LOCKED_WORDS)

    def get_password(self, service, username):
        self._enter()
        self.threads.add(threading.current_thread().name)
        return self.items.get((service, username))

    def set_password(self, service, username, password):
        self._enter()
        self.threads.add(threading.current_thread().name)
        self.items[(service, username)] = password

    def delete_password(self, service, username):
        self._enter()
        if (service, username) not in self.items:
            raise keyring.errors.PasswordDeleteError("not found")
        del self.items[(service, username)]


class LockedKeyring(MemoryKeyring):
    """Locked from the start: every call fails with KeyringLocked."""

    def __init__(self):
        super().__init__(locked=True)


class BrokenKeyring(MemoryKeyring):
    """Reads work; every store fails with an error that quotes the secret (which must not leak)."""

    def set_password(self, service, username, password):
        raise RuntimeError(f"dbus exploded while storing {password}")


class HangingKeyring(MemoryKeyring):
    """Every read waits until `release` is set (an unlock prompt nobody answers)."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def get_password(self, service, username):
        self.release.wait(30)
        return super().get_password(service, username)


class FileKeyring(KeyringBackend):
    """The entries in the JSON file CADRE_TEST_KEYRING_FILE names."""

    priority = 1

    @property
    def path(self) -> Path:
        try:
            return Path(os.environ[FILE_ENV])
        except KeyError:
            raise keyring.errors.InitError(f"{FILE_ENV} is not set") from None

    def _load(self) -> dict[str, str]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}\n{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._load()
        entries[f"{service}\n{username}"] = password
        write_json_atomic(self.path, entries)

    def delete_password(self, service: str, username: str) -> None:
        entries = self._load()
        if entries.pop(f"{service}\n{username}", None) is None:
            raise keyring.errors.PasswordDeleteError("no such entry")
        write_json_atomic(self.path, entries)

    def entries(self) -> dict[str, str]:
        return self._load()


class FaultyKeyring(FileKeyring):
    """FileKeyring, failing as the mode in the file CADRE_TEST_KEYRING_MODE names says."""

    def _check(self) -> None:
        try:
            mode = Path(os.environ[MODE_ENV]).read_text().strip()
        except (KeyError, FileNotFoundError):
            mode = "ok"
        if mode == "raise":
            raise RuntimeError("org.freedesktop.DBus.Error.ServiceUnknown: the secret service went away")
        if mode == "locked":
            raise keyring.errors.KeyringLocked(LOCKED_WORDS)
        if mode == "gone":
            raise keyring.errors.NoKeyringError("no recommended backend")

    def get_password(self, service: str, username: str) -> str | None:
        self._check()
        return super().get_password(service, username)

    def set_password(self, service: str, username: str, password: str) -> None:
        self._check()
        super().set_password(service, username, password)

    def delete_password(self, service: str, username: str) -> None:
        self._check()
        super().delete_password(service, username)
