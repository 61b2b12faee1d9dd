import pytest
from keyring.backends import fail, null

from cadre_desktop.errors import SecretsError
from cadre_desktop.host.core.vault.secrets import SERVICE, KeyringLocked, KeyringUnavailable, SecretKind, SecretStore, new_claim_secret
from tests.support.keyrings import BrokenKeyring, LockedKeyring, MemoryKeyring

SECRET = "the-claim-secret-value"


async def test_secrets_round_trip_under_contract_names_off_the_loop():
    backend = MemoryKeyring()
    store = SecretStore(backend)
    await store.set("n1", SecretKind.CLAIM, SECRET)
    await store.set("n1", SecretKind.INVITATION, "inv")
    assert backend.items[(SERVICE, "n1/claim-secret")] == SECRET
    assert backend.items[(SERVICE, "n1/invitation")] == "inv"
    assert await store.get("n1", SecretKind.CLAIM) == SECRET
    assert backend.threads and all(name.startswith("keyring") for name in backend.threads)
    await store.delete_all("n1")
    await store.delete_all("n1")  # deleting what is gone is fine
    assert backend.items == {}
    store.close()


@pytest.mark.parametrize("backend", [fail.Keyring(), null.Keyring()])
async def test_no_usable_backend_is_a_clear_error(backend):
    store = SecretStore(backend)
    with pytest.raises(KeyringUnavailable) as err:
        await store.set("n1", SecretKind.CLAIM, SECRET)
    assert "keyring" in err.value.message.lower()
    assert "Secret Service" in err.value.message
    assert err.value.code == "keyring_unavailable"
    store.close()


async def test_environment_chosen_backend_is_honoured(monkeypatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    import keyring.core
    keyring.core.init_backend()
    try:
        store = SecretStore()
        with pytest.raises(KeyringUnavailable):
            await store.check()
        store.close()
    finally:
        monkeypatch.delenv("PYTHON_KEYRING_BACKEND")
        keyring.core.init_backend()


async def test_locked_keyring_says_to_unlock_it():
    store = SecretStore(LockedKeyring())
    with pytest.raises(KeyringLocked) as err:
        await store.get("n1", SecretKind.CLAIM)
    assert "Unlock" in err.value.message
    store.close()


async def test_backend_error_never_carries_the_secret():
    store = SecretStore(BrokenKeyring())
    with pytest.raises(SecretsError) as err:
        await store.set("n1", SecretKind.CLAIM, SECRET)
    assert SECRET not in err.value.message
    assert SECRET not in str(err.value)
    assert "dbus exploded" in err.value.message
    store.close()


async def test_check_round_trips_and_leaves_nothing_behind():
    backend = MemoryKeyring()
    store = SecretStore(backend)
    assert "MemoryKeyring" in await store.check()
    assert backend.items == {}
    store.close()


def test_claim_secrets_are_long_and_fresh():
    a, b = new_claim_secret(), new_claim_secret()
    assert a != b and len(a) >= 40


def test_a_keyring_call_stuck_on_a_prompt_never_keeps_a_quitting_app_alive():
    """The stuck call times out for its caller, and the process still exits (its thread is a daemon)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import asyncio, threading\n"
        "from keyring.backend import KeyringBackend\n"
        "from cadre_desktop.host.core.vault.secrets import KeyringTimeout, SecretKind, SecretStore\n"
        "class Stuck(KeyringBackend):\n"
        "    priority = 1\n"
        "    def get_password(self, s, u): threading.Event().wait(600)\n"
        "    def set_password(self, s, u, p): pass\n"
        "    def delete_password(self, s, u): pass\n"
        "async def main():\n"
        "    store = SecretStore(Stuck(), timeout_s=0.1)\n"
        "    try:\n"
        "        await store.get('n1', SecretKind.CLAIM)\n"
        "    except KeyringTimeout as exc:\n"
        "        print('timed out:', exc.code)\n"
        "    store.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "timed out: keyring_timeout"


async def test_a_call_cancelled_as_the_keyring_answers_ends_cancelled():
    """The cancel of a closing gate can arrive in the very loop turn the keyring's answer
    does. asyncio.wait_for on Python 3.11 then handed back the answer and dropped the cancel,
    so the gate's fetcher went on to wait for ever and the host never finished closing."""
    import asyncio
    import time

    for turns in range(8):  # the cancel lands a different number of loop turns after the answer
        store = SecretStore(LockedKeyring())
        calls = []
        submit = store._executor.submit

        def recording_submit(fn, *a):
            calls.append(submit(fn, *a))
            return calls[-1]
        store._executor.submit = recording_submit  # type: ignore[method-assign, assignment]  # record every future it hands out
        task = asyncio.create_task(store.get("n1", SecretKind.CLAIM))
        await asyncio.sleep(0)
        deadline = time.monotonic() + 10
        while not (calls and calls[0].done()):  # the loop held still: the answer waits in its queue
            assert time.monotonic() < deadline, "the keyring thread never answered"
            time.sleep(0.001)
        for _ in range(turns):
            await asyncio.sleep(0)
        if task.cancel():
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            with pytest.raises(KeyringLocked):
                await task
        store.close()
