"""Claim secrets, invitations and lending tokens in the OS keyring.

Service name `cadre-desktop`, user name `<home id>/<node id>/claim-secret` or
`<home id>/<node id>/invitation`, and for lending `<home id>/<grant id>/grant-token`
and `<home id>/<donation id>/seed-token`: the home id (kept in the records file)
keeps two homes of one user apart, so a Remove in one never deletes a secret of
the other. Entries are only ever deleted for an id this home has or had (a row
or a tombstone, `owns`); removing an id the home does not know touches
nothing. Homes from before the home id used `<node id>/<kind>`; those entries
are moved to the new names once (`migrate`), and read where they are until
then (see docs/keyring.md). The backend is keyring's own choice, so
`PYTHON_KEYRING_BACKEND` is honoured. There is no plaintext fallback: no usable
backend, a locked keyring or a failing backend is a SecretsError a person can
act on, and the node is not created.

Keyring calls can block for a long time (an unlock prompt, a slow D-Bus
service), so every call runs on one dedicated worker thread: off the event loop,
and never two at once against a backend that may not be thread-safe. Messages
never carry a secret.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import secrets as _random
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from enum import Enum
from typing import Any, TypeVar

import keyring
import keyring.errors
from keyring.backend import KeyringBackend

from cadre_desktop import APP_NAME
from cadre_desktop.errors import SecretsError
from cadre_desktop.host.core.events import Listeners

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


def user_name(node_id: str, kind: SecretKind, home_id: str | None = None) -> str:
    """The keyring user name of a node's secret; without a home id, the old form."""
    return f"{home_id}/{node_id}/{kind.value}" if home_id else f"{node_id}/{kind.value}"


def _delete_name(b: KeyringBackend, name: str) -> bool:
    try:
        b.delete_password(SERVICE, name)
    except keyring.errors.PasswordDeleteError:
        return False
    return True


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
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._started = False
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
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

    def __init__(self, backend: KeyringBackend | None = None, *, timeout_s: float = KEYRING_TIMEOUT_S,
                 home_id: str | None = None, owns: Callable[[str], bool] | None = None,
                 legacy: bool = False) -> None:
        self._backend = backend
        self.timeout_s = timeout_s
        self.bind_home(home_id, owns, legacy=legacy)
        self._executor = _DaemonWorker("keyring")
        self._hung: asyncio.Future[Any] | None = None
        self._answer_listeners: Listeners[None] = Listeners("keyring answered")

    def bind_home(self, home_id: str | None, owns: Callable[[str], bool] | None = None, *,
                  legacy: bool = False) -> None:
        """Key entries by `home_id`; delete only for ids `owns` accepts; read old names while `legacy`."""
        self.home_id = home_id
        self._owns = owns
        #: Entries of this home may still be under the old names (not migrated yet).
        self.legacy = legacy and home_id is not None

    def _name(self, node_id: str, kind: SecretKind) -> str:
        return user_name(node_id, kind, self.home_id)

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
        def read(b: KeyringBackend) -> str | None:
            value = b.get_password(SERVICE, self._name(node_id, kind))
            if value is None and self.legacy:
                value = self._move_legacy(b, node_id, kind)
            return value
        return self._call("read a secret", read)

    def _move_legacy(self, b: KeyringBackend, node_id: str, kind: SecretKind) -> str | None:
        """Move one entry from its old name to its home-keyed name; its value, or None if none."""
        old = user_name(node_id, kind)
        value = b.get_password(SERVICE, old)
        if value is None:
            return None
        if b.get_password(SERVICE, self._name(node_id, kind)) is None:
            self._write(b, node_id, kind, value)
        _delete_name(b, old)
        return value

    def _write(self, b: KeyringBackend, node_id: str, kind: SecretKind, value: str) -> None:
        b.set_password(SERVICE, self._name(node_id, kind), value)
        # Some backends accept a write they cannot keep; read it back once.
        if b.get_password(SERVICE, self._name(node_id, kind)) != value:
            raise KeyringUnavailable(
                f"{_HELP_UNAVAILABLE} (the backend {backend_label(b)} did not keep a secret)"
            )

    def set_sync(self, node_id: str, kind: SecretKind, value: str) -> None:
        self._call("store a secret", lambda b: self._write(b, node_id, kind, value), secret=value)

    def delete_sync(self, node_id: str, kind: SecretKind) -> bool:
        """Delete a node's entry; an id this home neither has nor had is never touched."""
        if self._owns is not None and not self._owns(node_id):
            log.info("not deleting keyring entries of %s: no node of this home has or had that id", node_id)
            return False

        def delete(b: KeyringBackend) -> bool:
            deleted = _delete_name(b, self._name(node_id, kind))
            if self.legacy:
                deleted = _delete_name(b, user_name(node_id, kind)) or deleted
            return deleted
        return self._call("delete a secret", delete)

    def migrate_sync(self, node_id: str) -> int:
        """Move a node's old-form entries to their home-keyed names; how many moved."""
        if self.home_id is None:
            return 0
        return self._call("move a secret to its new name", lambda b: sum(
            self._move_legacy(b, node_id, kind) is not None for kind in SecretKind))

    def check_sync(self) -> str:
        """A round trip through the backend with a throwaway entry; returns its name."""
        name = f"doctor-{_random.token_hex(4)}/{SecretKind.CLAIM.value}"
        value = _random.token_urlsafe(16)

        def round_trip(b: KeyringBackend) -> None:
            b.set_password(SERVICE, name, value)
            if b.get_password(SERVICE, name) != value:
                raise KeyringUnavailable(f"{_HELP_UNAVAILABLE} (the backend {backend_label(b)} did not keep a secret)")
            _delete_name(b, name)
        self._call("store a secret", round_trip, secret=value)
        return backend_label(self._resolve())

    # -- on the event loop -----------------------------------------------------

    def on_answer(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Hear when a call that had timed out returns at last."""
        return self._answer_listeners.add(lambda _: listener())

    @property
    def hung(self) -> bool:
        return self._hung is not None and not self._hung.done()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self.hung:
            raise KeyringTimeout(_HELP_TIMEOUT.format(s=self.timeout_s))
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, fn, *args)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancellation that
            # arrives as the call returns, and a closing gate then waits for ever.
            async with asyncio.timeout(self.timeout_s):
                return await asyncio.shield(future)
        except TimeoutError:
            self._hung = future
            future.add_done_callback(self._answered)
            raise KeyringTimeout(_HELP_TIMEOUT.format(s=self.timeout_s)) from None

    def _answered(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            future.exception()  # retrieved, so asyncio does not log it as lost
        if future is self._hung:
            self._hung = None
            log.info("the keyring answered again")
            self._answer_listeners.tell(None)

    async def get(self, node_id: str, kind: SecretKind) -> str | None:
        return await self._run(self.get_sync, node_id, kind)

    async def set(self, node_id: str, kind: SecretKind, value: str) -> None:
        await self._run(self.set_sync, node_id, kind, value)

    async def delete(self, node_id: str, kind: SecretKind) -> bool:
        return await self._run(self.delete_sync, node_id, kind)

    async def migrate(self, node_id: str) -> int:
        return await self._run(self.migrate_sync, node_id)

    async def delete_all(self, node_id: str, kinds: tuple[SecretKind, ...] = NODE_KINDS) -> None:
        for kind in kinds:
            await self.delete(node_id, kind)

    async def check(self) -> str:
        return await self._run(self.check_sync)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


async def move_legacy_entries(store: SecretStore, node_ids: Iterable[str]) -> int:
    """Give every old-form entry of these nodes its home-keyed name, one node per keyring call.

    Raises SecretsError when the keyring fails; what was moved stays moved, and
    reads still find the rest under their old names, so it can simply run again.
    """
    moved = 0
    for node_id in node_ids:
        moved += await store.migrate(node_id)
    return moved
