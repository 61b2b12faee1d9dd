"""The keyring helper process against a real gnome-keyring on a private D-Bus session: the
host's reads and writes go through it (the Secret Service backend loads in the helper,
never here), a locked collection is still a host condition, and a helper that is killed
is replaced by the next call."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys

import psutil
import pytest

from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import KeyringLocked, SecretKind, SecretStore
from cadre_desktop.keyrings.keyring_helper import HelperCalls
from tests.support.polling import wait_until
from tests.support.session_bus import lock_default_collection, unlock_default_collection

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper is Linux's way")


@pytest.fixture
def keyring_env(secret_service, monkeypatch):
    for name, value in secret_service.items():
        monkeypatch.setenv(name, value)
    return secret_service


def helper_of(store: SecretStore) -> HelperCalls:
    assert isinstance(store.calls, HelperCalls)
    return store.calls


def test_thirty_secrets_stored_and_read_through_the_helper_never_on_its_command_line_or_environment(keyring_env):
    home = "h" + secrets.token_hex(8)
    values = {f"n{i}": secrets.token_urlsafe(32) for i in range(30)}

    async def scenario() -> None:
        store = SecretStore(home_id=home)
        try:
            for node_id, value in values.items():
                await store.set(node_id, SecretKind.CLAIM, value)
            helper = psutil.Process(helper_of(store).pid)
            assert helper.ppid() == os.getpid()
            seen = "\0".join(helper.cmdline()) + open(f"/proc/{helper.pid}/environ", "rb").read().decode(errors="replace")
            assert not any(value in seen for value in values.values())
            # The Secret Service backend (cryptography's Rust library under secretstorage) is in the helper.
            assert any("cryptography" in m.path for m in helper.memory_maps())
        finally:
            store.close()
        again = SecretStore(home_id=home)  # a host started later: a new helper reads them back
        try:
            gate = KeyringGate(again)
            await gate.prefetch([(node_id, SecretKind.CLAIM) for node_id in values])
            assert {n: gate.cached(n, SecretKind.CLAIM) for n in values} == values
            assert helper_of(again).started == 1
            await gate.close()
            for node_id in values:
                assert await again.delete(node_id, SecretKind.CLAIM)
        finally:
            again.close()
    asyncio.run(scenario())


def test_a_locked_collection_through_the_helper_is_the_keyring_condition_and_unlocking_ends_it(
        private_secret_service, monkeypatch):
    for name, value in private_secret_service.items():
        monkeypatch.setenv(name, value)

    async def scenario() -> None:
        store = SecretStore(home_id="hlocked00000001")
        gate = KeyringGate(store, sleep=lambda s: asyncio.sleep(3600))
        try:
            await gate.store("n1", SecretKind.CLAIM, "s3cret")
            lock_default_collection(private_secret_service)
            fresh = KeyringGate(store, sleep=lambda s: asyncio.sleep(3600))
            with pytest.raises(KeyringLocked):
                await fresh.load("n1", SecretKind.CLAIM)
            assert fresh.condition is not None and fresh.condition.code == "keyring_locked"
            assert not fresh.is_missing("n1", SecretKind.CLAIM)
            unlock_default_collection(private_secret_service)
            assert await fresh.load("n1", SecretKind.CLAIM) == "s3cret"
            assert fresh.condition is None
            await fresh.close()
        finally:
            await gate.close()
            store.close()
    asyncio.run(scenario())


def test_a_helper_killed_between_calls_is_replaced_by_the_next_call(keyring_env):
    async def scenario() -> None:
        store = SecretStore(home_id="h" + secrets.token_hex(8))
        try:
            await store.set("n1", SecretKind.CLAIM, "s3cret")
            helper = helper_of(store)
            pid = helper.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: helper.pid is None, timeout=10, what="the killed helper is gone")
            assert await store.get("n1", SecretKind.CLAIM) == "s3cret"
            assert helper.started == 2
            await store.delete("n1", SecretKind.CLAIM)
        finally:
            store.close()
    asyncio.run(scenario())
