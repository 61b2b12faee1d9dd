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
and never two at once against a backend that may not be thread-safe. On Linux
that thread hands each call to the keyring helper process
(`cadre_desktop/keyrings/keyring_helper.py`), so the Secret Service backend never loads in
the host; on Windows and macOS, and with a backend given by hand, it calls the
backend itself (`cadre_desktop/keyrings/keyring_calls.py`). Messages never carry a secret.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import secrets as _random
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar, TypeVarTuple

from cadre_desktop.host.core.events import Listeners
from cadre_desktop.keyrings.keyring_helper import IDLE_S, HelperCalls, isolate_by_default
from cadre_desktop.keyrings.keyring_names import (
    SERVICE,
    KeyringCalls,
    KeyringLocked,
    KeyringTimeout,
    KeyringUnavailable,
    SecretKind,
    Where,
    user_name,
)

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend

__all__ = ["SERVICE", "KeyringLocked", "KeyringTimeout", "KeyringUnavailable", "SecretKind", "SecretStore",
           "make_calls", "move_legacy_entries", "new_claim_secret", "user_name"]

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
Ts = TypeVarTuple("Ts")


class _Pending(Protocol):
    """A call under way: whether it has returned yet."""

    def done(self) -> bool: ...

#: How long one keyring call may take before the host stops waiting for it.
KEYRING_TIMEOUT_S = 10.0

_HELP_TIMEOUT = (
    "The keyring did not answer within {s:.0f} s; it may be waiting for you to unlock it "
    "(look for an unlock prompt). cadre-desktop carries on and asks again when it answers."
)


#: What a hosted node may have in the keyring (what removing it deletes).
NODE_KINDS = (SecretKind.CLAIM, SecretKind.INVITATION)


def new_claim_secret() -> str:
    """256 random bits, URL-safe (it travels in a QR code's URL fragment)."""
    return _random.token_urlsafe(32)


def make_calls(backend: KeyringBackend | None = None, *, platform: str = sys.platform) -> KeyringCalls:
    """The keyring calls this host makes: against `backend` when one is given, else through
    the helper process where the platform's backend is heavy (Linux), else in this process."""
    if backend is None and isolate_by_default(platform):
        return HelperCalls()
    from cadre_desktop.keyrings.keyring_calls import BackendCalls

    return BackendCalls(backend)


class _DaemonWorker(Executor):
    """One daemon thread that runs keyring calls in order.

    Not a ThreadPoolExecutor: Python joins those threads at exit, so a call
    stuck on an unlock prompt would keep a quitting app alive until someone
    answers the prompt. A daemon thread is simply left behind. After `idle_s`
    without a call it runs `on_idle` once (the helper process goes), and at
    shutdown too.
    """

    def __init__(self, name: str, *, idle_s: float | None = None, on_idle: Callable[[], None] = lambda: None) -> None:
        #: Each job runs its call and hands the outcome to its future; None ends the worker.
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._started = False
        self._closed = False
        self._lock = threading.Lock()
        self._idle_s = idle_s
        self._on_idle = on_idle

    @property
    def started(self) -> bool:
        return self._started

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        job = functools.partial(_settle, future, functools.partial(fn, *args, **kwargs))
        with self._lock:
            if self._closed:
                raise RuntimeError("the keyring worker is closed")
            if not self._started:
                self._thread.start()
                self._started = True
            self._jobs.put(job)
        return future

    def _next(self, busy: bool) -> Callable[[], None] | None:
        """The next job; after a job, `on_idle` once when none comes within idle_s."""
        if busy and self._idle_s is not None:
            try:
                return self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                self._let_go()
        return self._jobs.get()

    def _let_go(self) -> None:
        try:
            self._on_idle()
        except Exception:  # never the worker's end
            log.exception("closing the keyring helper failed")

    def _work(self) -> None:
        busy = False
        while True:
            job = self._next(busy)
            if job is None:
                self._let_go()
                return
            busy = True
            job()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            if self._started:
                self._jobs.put(None)
        if wait and self._started:
            self._thread.join()


def _settle(future: Future[T], call: Callable[[], T]) -> None:
    """A job of the keyring worker: `call`'s outcome, returned or raised, handed to `future`
    (nothing is called when it was cancelled first)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(call())
    except BaseException as exc:  # handed to the caller, never lost
        future.set_exception(exc)


class SecretStore:
    """The keyring, one call at a time on a worker thread, every call bounded.

    A call that does not answer within `timeout_s` fails with KeyringTimeout,
    but its thread cannot be interrupted: it is still waiting (an unlock prompt
    nobody answered). Until it returns, every further call fails at once with
    the same error instead of queueing behind it, so a hung keyring costs each
    caller nothing but that error. `on_answer` listeners hear when a hung call
    finally returns: the keyring works again.

    `backend` (tests, a backend chosen in code) is called in this process; without
    one, `calls` or `make_calls()` decides (the helper process on Linux).
    """

    def __init__(self, backend: KeyringBackend | None = None, *, timeout_s: float = KEYRING_TIMEOUT_S,
                 home_id: str | None = None, owns: Callable[[str], bool] | None = None,
                 legacy: bool = False, calls: KeyringCalls | None = None, idle_s: float = IDLE_S) -> None:
        self.calls = calls or make_calls(backend)
        self.timeout_s = timeout_s
        self.bind_home(home_id, owns, legacy=legacy)
        self._executor = _DaemonWorker("keyring", idle_s=idle_s, on_idle=self.calls.close)
        self._hung: _Pending | None = None
        self._answer_listeners: Listeners[None] = Listeners("keyring answered")

    def bind_home(self, home_id: str | None, owns: Callable[[str], bool] | None = None, *,
                  legacy: bool = False) -> None:
        """Key entries by `home_id`; delete only for ids `owns` accepts; read old names while `legacy`."""
        self.home_id = home_id
        self._owns = owns
        #: Entries of this home may still be under the old names (not migrated yet).
        self.legacy = legacy and home_id is not None

    @property
    def _where(self) -> Where:
        return Where(self.home_id, self.legacy)

    # -- on the worker thread (or a caller with no loop: doctor) ---------------------

    def get_sync(self, node_id: str, kind: SecretKind) -> str | None:
        return self.calls.get(self._where, node_id, kind)

    def set_sync(self, node_id: str, kind: SecretKind, value: str) -> None:
        self.calls.set(self._where, node_id, kind, value)

    def delete_sync(self, node_id: str, kind: SecretKind) -> bool:
        """Delete a node's entry; an id this home neither has nor had is never touched."""
        if self._owns is not None and not self._owns(node_id):
            log.info("not deleting keyring entries of %s: no node of this home has or had that id", node_id)
            return False
        return self.calls.delete(self._where, node_id, kind)

    def migrate_sync(self, node_id: str) -> int:
        """Move a node's old-form entries to their home-keyed names; how many moved."""
        return self.calls.migrate(self._where, node_id)

    def check_sync(self) -> str:
        """A round trip through the backend with a throwaway entry; returns its name."""
        return self.calls.check()

    # -- on the event loop -----------------------------------------------------

    def on_answer(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Hear when a call that had timed out returns at last."""
        return self._answer_listeners.add(lambda _: listener())

    @property
    def hung(self) -> bool:
        return self._hung is not None and not self._hung.done()

    async def _run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
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

    def _answered(self, future: asyncio.Future[T]) -> None:
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
        """No more calls; the helper process goes (after a call still in flight returns)."""
        started = self._executor.started
        self._executor.shutdown(wait=False, cancel_futures=True)
        if not started:  # no worker to close it (doctor's calls ran on its own thread)
            self.calls.close()


async def move_legacy_entries(store: SecretStore, node_ids: Iterable[str]) -> int:
    """Give every old-form entry of these nodes its home-keyed name, one node per keyring call.

    Raises SecretsError when the keyring fails; what was moved stays moved, and
    reads still find the rest under their old names, so it can simply run again.
    """
    moved = 0
    for node_id in node_ids:
        moved += await store.migrate(node_id)
    return moved
