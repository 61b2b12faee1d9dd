"""Claim secrets, invitations and lending tokens in the OS keyring.

Service name `cadre-desktop`, user name `<node id>/claim-secret`,
`<node id>/invitation`, `<grant id>/grant-token` or `<donation id>/seed-token`.
The backend is keyring's own choice, so `PYTHON_KEYRING_BACKEND` is honoured.
There is no plaintext fallback: no usable backend, a locked keyring or a
failing backend is a SecretsError a person can act on, and the node is not
created.

Keyring calls can block for a long time (an unlock prompt, a slow D-Bus
service), so every call runs on one dedicated worker thread: off the event loop,
and never two at once against a backend that may not be thread-safe. Messages
never carry a secret.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets as _random
import queue
import threading
from concurrent.futures import Executor, Future
from enum import Enum
from typing import Callable, TypeVar

import keyring
import keyring.errors
from keyring.backend import KeyringBackend

from cadre_desktop import APP_NAME
from cadre_desktop.errors import SecretsError

log = logging.getLogger(__name__)

SERVICE = APP_NAME
T = TypeVar("T")

_HELP_UNAVAILABLE = (
    "No usable keyring (secret store) was found, so cadre-desktop cannot keep claim "
    "secrets safely. On Linux install and unlock a Secret Service provider (GNOME "
    "Keyring or KWallet); on Windows and macOS the system keyring is used. "
    "PYTHON_KEYRING_BACKEND selects a backend by hand."
)
_HELP_LOCKED = (
    "The keyring is locked. Unlock it (log in to the desktop, or open your keyring "
    "app and unlock it) and try again."
)


class KeyringUnavailable(SecretsError):
    code = "keyring_unavailable"


class KeyringLocked(SecretsError):
    code = "keyring_locked"


class KeyringTimeout(SecretsError):
    code = "keyring_timeout"


#: How long one keyring call may take before the host stops waiting for it.
KEYRING_TIMEOUT_S = 10.0

_HELP_TIMEOUT = (
    "The keyring did not answer within {s:.0f} s; it may be waiting for you to unlock it "
    "(look for an unlock prompt). cadre-desktop carries on and asks again when it answers."
)


class SecretKind(str, Enum):
    CLAIM = "claim-secret"
    INVITATION = "invitation"
    #: Lending: a grant's token (`<grant id>/grant-token`), a donated node's seed token
    #: (`<donation id>/seed-token`).
    GRANT_TOKEN = "grant-token"
    SEED_TOKEN = "seed-token"


#: What a hosted node may have in the keyring (what removing it deletes).
NODE_KINDS = (SecretKind.CLAIM, SecretKind.INVITATION)


def user_name(node_id: str, kind: SecretKind) -> str:
    return f"{node_id}/{kind.value}"


def new_claim_secret() -> str:
    """256 random bits, URL-safe (it travels in a QR code's URL fragment)."""
    return _random.token_urlsafe(32)


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


def backend_label(backend: KeyringBackend) -> str:
    return f"{type(backend).__module__}.{type(backend).__name__}"


class _DaemonWorker(Executor):
    """One daemon thread that runs keyring calls in order.

    Not a ThreadPoolExecutor: Python joins those threads at exit, so a call
    stuck on an unlock prompt would keep a quitting app alive until someone
    answers the prompt. A daemon thread is simply left behind.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._started = False
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the keyring worker is closed")
            if not self._started:
                self._thread.start()
                self._started = True
            self._jobs.put((future, fn, args, kwargs))
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the caller, never lost
                future.set_exception(exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            if self._started:
                self._jobs.put(None)
        if wait and self._started:
            self._thread.join()


class SecretStore:
    """The keyring, one call at a time on a worker thread, every call bounded.

    A call that does not answer within `timeout_s` fails with KeyringTimeout,
    but its thread cannot be interrupted: it is still waiting (an unlock prompt
    nobody answered). Until it returns, every further call fails at once with
    the same error instead of queueing behind it, so a hung keyring costs each
    caller nothing but that error. `on_answer` listeners hear when a hung call
    finally returns: the keyring works again.
    """

    def __init__(self, backend: KeyringBackend | None = None, *, timeout_s: float = KEYRING_TIMEOUT_S) -> None:
        self._backend = backend
        self.timeout_s = timeout_s
        self._executor = _DaemonWorker("keyring")
        self._hung: asyncio.Future | None = None
        self._answer_listeners: list[Callable[[], None]] = []

    # -- on the worker thread -------------------------------------------------

    def _resolve(self) -> KeyringBackend:
        if self._backend is None:
            try:
                self._backend = keyring.get_keyring()
            except Exception as exc:  # a backend that fails to initialise
                raise KeyringUnavailable(f"{_HELP_UNAVAILABLE} ({type(exc).__name__})") from None
        if _is_unusable(self._backend):
            raise KeyringUnavailable(f"{_HELP_UNAVAILABLE} (found {backend_label(self._backend)})")
        return self._backend

    def _call(self, action: str, fn: Callable[[KeyringBackend], T], secret: str | None = None) -> T:
        backend = self._resolve()
        try:
            return fn(backend)
        except keyring.errors.KeyringLocked:
            raise KeyringLocked(_HELP_LOCKED) from None
        except keyring.errors.NoKeyringError:
            raise KeyringUnavailable(_HELP_UNAVAILABLE) from None
        except SecretsError:
            raise
        except Exception as exc:
            detail = str(exc)
            if secret and secret in detail:
                detail = detail.replace(secret, "<redacted>")
            if "locked" in detail.lower():
                raise KeyringLocked(_HELP_LOCKED) from None
            raise SecretsError(
                f"The keyring ({backend_label(backend)}) failed to {action}: "
                f"{type(exc).__name__}: {detail[:200]}"
            ) from None

    def get_sync(self, node_id: str, kind: SecretKind) -> str | None:
        return self._call(
            "read a secret", lambda b: b.get_password(SERVICE, user_name(node_id, kind))
        )

    def set_sync(self, node_id: str, kind: SecretKind, value: str) -> None:
        def store(b: KeyringBackend) -> None:
            b.set_password(SERVICE, user_name(node_id, kind), value)
            # Some backends accept a write they cannot keep; read it back once.
            if b.get_password(SERVICE, user_name(node_id, kind)) != value:
                raise KeyringUnavailable(
                    f"{_HELP_UNAVAILABLE} (the backend {backend_label(b)} did not keep a secret)"
                )
        self._call("store a secret", store, secret=value)

    def delete_sync(self, node_id: str, kind: SecretKind) -> bool:
        def delete(b: KeyringBackend) -> bool:
            try:
                b.delete_password(SERVICE, user_name(node_id, kind))
            except keyring.errors.PasswordDeleteError:
                return False
            return True
        return self._call("delete a secret", delete)

    def check_sync(self) -> str:
        """A round trip through the backend with a throwaway entry; returns its name."""
        probe_id = f"doctor-{_random.token_hex(4)}"
        value = _random.token_urlsafe(16)
        self.set_sync(probe_id, SecretKind.CLAIM, value)
        self.delete_sync(probe_id, SecretKind.CLAIM)
        return backend_label(self._resolve())

    # -- on the event loop -----------------------------------------------------

    def on_answer(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Hear when a call that had timed out returns at last."""
        self._answer_listeners.append(listener)
        return lambda: self._answer_listeners.remove(listener) if listener in self._answer_listeners else None

    @property
    def hung(self) -> bool:
        return self._hung is not None and not self._hung.done()

    async def _run(self, fn: Callable[..., T], *args) -> T:
        if self.hung:
            raise KeyringTimeout(_HELP_TIMEOUT.format(s=self.timeout_s))
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, fn, *args)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except asyncio.TimeoutError:
            self._hung = future
            future.add_done_callback(self._answered)
            raise KeyringTimeout(_HELP_TIMEOUT.format(s=self.timeout_s)) from None

    def _answered(self, future: asyncio.Future) -> None:
        if not future.cancelled():
            future.exception()  # retrieved, so asyncio does not log it as lost
        if future is self._hung:
            self._hung = None
            log.info("the keyring answered again")
            for listener in list(self._answer_listeners):
                try:
                    listener()
                except Exception:
                    log.exception("keyring listener failed")

    async def get(self, node_id: str, kind: SecretKind) -> str | None:
        return await self._run(self.get_sync, node_id, kind)

    async def set(self, node_id: str, kind: SecretKind, value: str) -> None:
        await self._run(self.set_sync, node_id, kind, value)

    async def delete(self, node_id: str, kind: SecretKind) -> bool:
        return await self._run(self.delete_sync, node_id, kind)

    async def delete_all(self, node_id: str, kinds: tuple[SecretKind, ...] = NODE_KINDS) -> None:
        for kind in kinds:
            await self.delete(node_id, kind)

    async def check(self) -> str:
        return await self._run(self.check_sync)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
