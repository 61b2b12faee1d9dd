"""A file-backed keyring for tests that run the host in a subprocess.

Select it with PYTHON_KEYRING_BACKEND=tests.support.test_keyring.TestKeyring
and name the file in CADRE_TEST_KEYRING_FILE (the repository root must be on
the child's PYTHONPATH). Entries are a JSON object "service\\nuser" -> secret,
replaced atomically so a host and a CLI can share it. Tests only: it keeps
secrets in plain text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import keyring.errors
from keyring.backend import KeyringBackend

from cadre_desktop.atomicfile import write_json_atomic

FILE_ENV = "CADRE_TEST_KEYRING_FILE"


class TestKeyring(KeyringBackend):
    __test__ = False  # not a pytest test class
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
