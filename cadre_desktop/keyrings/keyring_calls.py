"""The keyring's calls against a backend in this process (it imports `keyring`).

Used where the calls run in the process that asks (Windows and macOS, whose backends
are light; tests with a fake backend) and inside the keyring helper process
(`keyring_helper`), which runs them for the host on Linux. The backend is keyring's
own choice, so `PYTHON_KEYRING_BACKEND` is honoured; there is no plaintext fallback:
no usable backend, a locked keyring or a failing backend is a SecretsError a person can
act on. Messages never carry a secret.
"""

from __future__ import annotations

import os
import secrets as _random
from collections.abc import Callable
from typing import TypeVar

import keyring
import keyring.errors
from keyring.backend import KeyringBackend

from cadre_desktop.errors import SecretsError
from cadre_desktop.keyrings.keyring_names import (
    HELP_LOCKED,
    HELP_UNAVAILABLE,
    SERVICE,
    KeyringLocked,
    KeyringUnavailable,
    SecretKind,
    Where,
    user_name,
)

T = TypeVar("T")

#: What the session bus answers a call whose Secret Service ended before answering it
#: (org.freedesktop.DBus.Error.NoReply). gnome-keyring 42 aborts when another client leaves
#: in the middle of a call of its own; the bus starts it again on the next call.
VANISHED = "disconnected from message bus without replying"


def _delete_name(b: KeyringBackend, name: str) -> bool:
    try:
        b.delete_password(SERVICE, name)
    except keyring.errors.PasswordDeleteError:
        return False
    return True


def _is_unusable(backend: KeyringBackend) -> bool:
    """Backends that would lose a secret silently or keep it in plain text."""
    from keyring.backends import chainer, fail, null

    if isinstance(backend, (fail.Keyring, null.Keyring)):
        return True
    if isinstance(backend, chainer.ChainerBackend) and not backend.backends:
        return True
    module = type(backend).__module__
    explicit = bool(os.environ.get("PYTHON_KEYRING_BACKEND"))
    # keyrings.alt's plaintext and file backends are fine only when chosen by name.
    if module.startswith("keyrings.alt") and not explicit:
        return True
    return False


def _vanished(exc: BaseException) -> bool:
    """The keyring's service ended before answering: said by this error or one it was raised from."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain is short; a cycle must not hold a call
        if seen is None:
            return False
        if VANISHED in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def backend_label(backend: KeyringBackend) -> str:
    return f"{type(backend).__module__}.{type(backend).__name__}"


class BackendCalls:
    """`KeyringCalls` against one backend (keyring's choice when none is given)."""

    def __init__(self, backend: KeyringBackend | None = None) -> None:
        self._backend = backend

    def _resolve(self) -> KeyringBackend:
        if self._backend is None:
            try:
                self._backend = keyring.get_keyring()
            except Exception as exc:  # a backend that fails to initialise
                raise KeyringUnavailable(f"{HELP_UNAVAILABLE} ({type(exc).__name__})") from None
        if _is_unusable(self._backend):
            raise KeyringUnavailable(f"{HELP_UNAVAILABLE} (found {backend_label(self._backend)})")
        return self._backend

    def _call(self, action: str, fn: Callable[[KeyringBackend], T], secret: str | None = None) -> T:
        backend = self._resolve()
        try:
            try:
                return fn(backend)
            except Exception as exc:
                if not _vanished(exc):
                    raise
            # Sent once more, on a connection of its own (the backend opens one a call): the
            # keyring that answers it is the one the bus started anew. Each call is a read or a
            # write of one whole value, so asking twice leaves what asking once does.
            try:
                return fn(backend)
            except Exception as exc:
                if _vanished(exc):
                    raise KeyringUnavailable(f"{HELP_UNAVAILABLE} (the keyring ended in the middle of a call, "
                                             "twice)") from None
                raise
        except keyring.errors.KeyringLocked:
            raise KeyringLocked(HELP_LOCKED) from None
        except keyring.errors.NoKeyringError:
            raise KeyringUnavailable(HELP_UNAVAILABLE) from None
        except SecretsError:
            raise
        except Exception as exc:
            detail = str(exc)
            if secret and secret in detail:
                detail = detail.replace(secret, "<redacted>")
            if "locked" in detail.lower():
                raise KeyringLocked(HELP_LOCKED) from None
            raise SecretsError(
                f"The keyring ({backend_label(backend)}) failed to {action}: "
                f"{type(exc).__name__}: {detail[:200]}"
            ) from None

    def get(self, where: Where, node_id: str, kind: SecretKind) -> str | None:
        def read(b: KeyringBackend) -> str | None:
            value = b.get_password(SERVICE, user_name(node_id, kind, where.home_id))
            if value is None and where.legacy:
                value = self._move_legacy(b, where, node_id, kind)
            return value
        return self._call("read a secret", read)

    def _move_legacy(self, b: KeyringBackend, where: Where, node_id: str, kind: SecretKind) -> str | None:
        """Move one entry from its old name to its home-keyed name; its value, or None if none."""
        old = user_name(node_id, kind)
        value = b.get_password(SERVICE, old)
        if value is None:
            return None
        if b.get_password(SERVICE, user_name(node_id, kind, where.home_id)) is None:
            self._write(b, where, node_id, kind, value)
        _delete_name(b, old)
        return value

    @staticmethod
    def _write(b: KeyringBackend, where: Where, node_id: str, kind: SecretKind, value: str) -> None:
        name = user_name(node_id, kind, where.home_id)
        b.set_password(SERVICE, name, value)
        # Some backends accept a write they cannot keep; read it back once.
        if b.get_password(SERVICE, name) != value:
            raise KeyringUnavailable(
                f"{HELP_UNAVAILABLE} (the backend {backend_label(b)} did not keep a secret)"
            )

    def set(self, where: Where, node_id: str, kind: SecretKind, value: str) -> None:
        self._call("store a secret", lambda b: self._write(b, where, node_id, kind, value), secret=value)

    def delete(self, where: Where, node_id: str, kind: SecretKind) -> bool:
        def delete(b: KeyringBackend) -> bool:
            deleted = _delete_name(b, user_name(node_id, kind, where.home_id))
            if where.legacy:
                deleted = _delete_name(b, user_name(node_id, kind)) or deleted
            return deleted
        return self._call("delete a secret", delete)

    def migrate(self, where: Where, node_id: str) -> int:
        if where.home_id is None:
            return 0
        return self._call("move a secret to its new name", lambda b: sum(
            self._move_legacy(b, where, node_id, kind) is not None for kind in SecretKind))

    def check(self) -> str:
        name = f"doctor-{_random.token_hex(4)}/{SecretKind.CLAIM.value}"
        value = _random.token_urlsafe(16)

        def round_trip(b: KeyringBackend) -> None:
            b.set_password(SERVICE, name, value)
            if b.get_password(SERVICE, name) != value:
                raise KeyringUnavailable(f"{HELP_UNAVAILABLE} (the backend {backend_label(b)} did not keep a secret)")
            _delete_name(b, name)
        self._call("store a secret", round_trip, secret=value)
        return backend_label(self._resolve())

    def close(self) -> None:
        """Nothing to let go of: the backend lives as long as this process."""
