"""A file-backed test keyring whose failures a test switches on and off while a host runs.

Select it with PYTHON_KEYRING_BACKEND=tests.support.faulty_keyring.FaultyKeyring,
CADRE_TEST_KEYRING_FILE (the entries) and CADRE_TEST_KEYRING_MODE (a file
holding the mode). Modes: `ok`; `raise` (the backend fails the way a broken
D-Bus service does); `locked` (keyring.errors.KeyringLocked, as when the user
dismissed the unlock prompt); `gone` (keyring.errors.NoKeyringError). Tests only:
it keeps secrets in plain text.
"""

from __future__ import annotations

import os
from pathlib import Path

import keyring.errors

from tests.support.test_keyring import TestKeyring

MODE_ENV = "CADRE_TEST_KEYRING_MODE"


class FaultyKeyring(TestKeyring):
    __test__ = False

    def _check(self) -> None:
        try:
            mode = Path(os.environ[MODE_ENV]).read_text().strip()
        except (KeyError, FileNotFoundError):
            mode = "ok"
        if mode == "raise":
            raise RuntimeError("org.freedesktop.DBus.Error.ServiceUnknown: the secret service went away")
        if mode == "locked":
            raise keyring.errors.KeyringLocked("Failed to unlock the collection!")
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
