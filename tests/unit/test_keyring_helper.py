"""The keyring helper process: its protocol, its life (on demand, closed when idle, its death
noticed) and which platform uses it. A FileKeyring stands in for the Secret Service (the
real one: tests/integration/test_keyring_helper.py)."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys

import pytest

from cadre_desktop.errors import SecretsError
from cadre_desktop.host.core.vault.keyring_gate import KeyringGate
from cadre_desktop.host.core.vault.secrets import SecretStore, make_calls
from cadre_desktop.keyrings.keyring_calls import BackendCalls
from cadre_desktop.keyrings.keyring_helper import FLAG, HelperCalls, helper_command, isolate_by_default, serve
from cadre_desktop.keyrings.keyring_names import KeyringLocked, KeyringUnavailable, SecretKind, Where
from tests.support.keyrings import FILE_ENV, MemoryKeyring
from tests.support.polling import wait_until
from tests.support.processes import ended

HOME = Where("hhome0001")


@pytest.fixture
def file_keyring(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "tests.support.keyrings.FileKeyring")
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "keyring.json"))
    return tmp_path / "keyring.json"


# -- which platform uses it ------------------------------------------------------------------

def test_linux_uses_the_helper_windows_and_macos_call_in_process():
    assert isolate_by_default("linux") and isolate_by_default("freebsd14")
    assert not isolate_by_default("win32") and not isolate_by_default("darwin")
    assert isinstance(make_calls(platform="linux"), HelperCalls)
    assert isinstance(make_calls(platform="win32"), BackendCalls)
    assert isinstance(make_calls(platform="darwin"), BackendCalls)
    # A backend given in code is called in this process, whatever the platform.
    assert isinstance(make_calls(MemoryKeyring(), platform="linux"), BackendCalls)


def test_the_helper_is_this_python_or_the_bundle_with_its_flag():
    assert helper_command(frozen=False, executable="/py") == ["/py", "-m", "cadre_desktop.keyrings.keyring_helper"]
    assert helper_command(frozen=True, executable="/opt/cadre-desktop") == ["/opt/cadre-desktop", FLAG]


# -- the protocol, served in this process ------------------------------------------------------

def served(requests: list[bytes], calls) -> list[dict]:
    out = io.BytesIO()
    serve(io.BytesIO(b"".join(requests)), out, calls)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_serve_answers_each_request_in_order_with_its_id():
    calls = BackendCalls(MemoryKeyring())
    answers = served([
        json.dumps({"id": 1, "op": "set", "home": "h1", "legacy": False, "node": "n1", "kind": "claim-secret",
                    "value": "s3cret"}).encode() + b"\n",
        json.dumps({"id": 2, "op": "get", "home": "h1", "legacy": False, "node": "n1",
                    "kind": "claim-secret"}).encode() + b"\n",
        json.dumps({"id": 3, "op": "get", "home": "h1", "legacy": False, "node": "n2",
                    "kind": "claim-secret"}).encode() + b"\n",
        json.dumps({"id": 4, "op": "delete", "home": "h1", "legacy": False, "node": "n1",
                    "kind": "claim-secret"}).encode() + b"\n",
    ], calls)
    assert answers == [{"id": 1, "result": None}, {"id": 2, "result": "s3cret"}, {"id": 3, "result": None},
                       {"id": 4, "result": True}]


def test_serve_answers_a_refusal_in_words_with_its_code():
    keyring = MemoryKeyring(locked=True)
    [answer] = served([json.dumps({"id": 7, "op": "get", "home": "h1", "legacy": False, "node": "n1",
                                   "kind": "claim-secret"}).encode() + b"\n"], BackendCalls(keyring))
    assert answer["id"] == 7 and answer["error"]["code"] == "keyring_locked"
    assert "locked" in answer["error"]["message"]


def test_serve_answers_a_request_it_cannot_read_with_its_type_never_its_text():
    answers = served([b'{"id": 1, "op": "get", "value": "s3cret-in-a-bad-request"\n',
                      json.dumps({"id": 2, "op": "format-disk"}).encode() + b"\n"], BackendCalls(MemoryKeyring()))
    assert [a["error"]["code"] for a in answers] == ["keyring_unavailable"] * 2
    assert answers[0]["id"] is None and answers[1]["id"] == 2
    assert not any("s3cret" in a["error"]["message"] for a in answers)


# -- the helper process -------------------------------------------------------------------------

def test_every_call_round_trips_through_one_helper(file_keyring):
    calls = HelperCalls()
    try:
        calls.set(HOME, "n1", SecretKind.CLAIM, "s3cret")
        assert calls.get(HOME, "n1", SecretKind.CLAIM) == "s3cret"
        assert calls.get(HOME, "n2", SecretKind.CLAIM) is None
        assert calls.delete(HOME, "n1", SecretKind.CLAIM) is True
        assert calls.get(HOME, "n1", SecretKind.CLAIM) is None
        calls.set(Where(None), "old", SecretKind.INVITATION, "inv")  # an entry from before the home id
        assert calls.migrate(Where(HOME.home_id, legacy=True), "old") == 1
        assert calls.get(HOME, "old", SecretKind.INVITATION) == "inv"
        assert calls.check() == "tests.support.keyrings.FileKeyring"
        assert calls.started == 1
    finally:
        calls.close()


def test_a_refusal_in_the_helper_is_the_same_error_here(tmp_path, monkeypatch):
    mode = tmp_path / "mode"
    mode.write_text("locked")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "tests.support.keyrings.FaultyKeyring")
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "keyring.json"))
    monkeypatch.setenv("CADRE_TEST_KEYRING_MODE", str(mode))
    calls = HelperCalls()
    try:
        with pytest.raises(KeyringLocked):
            calls.get(HOME, "n1", SecretKind.CLAIM)
        mode.write_text("raise")
        with pytest.raises(SecretsError, match="failed to read a secret: RuntimeError") as raised:
            calls.get(HOME, "n1", SecretKind.CLAIM)
        assert type(raised.value) is SecretsError
        assert calls.started == 1  # a refusal is an answer: the helper stays
    finally:
        calls.close()


def test_a_helper_that_dies_during_a_call_fails_it_as_unavailable_and_the_next_call_starts_another():
    dies = [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(3)"]
    calls = HelperCalls(dies)
    with pytest.raises(KeyringUnavailable, match=r"ended \(exit code 3\)"):
        calls.get(HOME, "n1", SecretKind.CLAIM)
    with pytest.raises(KeyringUnavailable):
        calls.get(HOME, "n1", SecretKind.CLAIM)
    assert calls.started == 2 and calls.pid is None


def test_a_helper_that_answers_nonsense_is_ended_and_the_call_fails_as_unavailable():
    nonsense = [sys.executable, "-c", "import sys, time; sys.stdin.readline(); print('{\"id\": 99, \"result\": \"x\"}', "
                "flush=True); time.sleep(60)"]
    calls = HelperCalls(nonsense)
    with pytest.raises(KeyringUnavailable, match="nonsense"):
        calls.get(HOME, "n1", SecretKind.CLAIM)
    assert calls.pid is None


@pytest.mark.parametrize("result", ['5', '["s3cret"]', 'true'])
def test_a_read_answered_with_something_not_a_secret_is_unavailable_never_missing(result):
    wrong = [sys.executable, "-c", "import sys, time; sys.stdin.readline(); "
             f"print('{{\"id\": 1, \"result\": {result}}}', flush=True); time.sleep(60)"]
    calls = HelperCalls(wrong)
    with pytest.raises(KeyringUnavailable, match="nonsense"):
        calls.get(HOME, "n1", SecretKind.CLAIM)
    assert calls.pid is None


def test_a_helper_that_cannot_start_is_unavailable(tmp_path):
    calls = HelperCalls([str(tmp_path / "no-such-program")])
    with pytest.raises(KeyringUnavailable, match="could not start"):
        calls.get(HOME, "n1", SecretKind.CLAIM)


def test_the_helper_flag_of_the_one_executable_serves_the_pipe(file_keyring):
    calls = HelperCalls([sys.executable, "-m", "cadre_desktop", FLAG])
    try:
        calls.set(HOME, "n1", SecretKind.CLAIM, "s3cret")
        assert calls.get(HOME, "n1", SecretKind.CLAIM) == "s3cret"
    finally:
        calls.close()


# -- in the store and the gate ---------------------------------------------------------------

def test_thirty_reads_at_start_are_one_batch_for_one_helper_closed_when_idle(file_keyring):
    async def scenario():
        store = SecretStore(home_id="hhome0001", idle_s=0.3)
        assert isinstance(store.calls, HelperCalls)
        try:
            for i in range(30):
                await store.set(f"n{i}", SecretKind.CLAIM, f"secret-{i}")
            pid = store.calls.pid
            assert pid is not None
            values = [await store.get(f"n{i}", SecretKind.CLAIM) for i in range(30)]
            assert values == [f"secret-{i}" for i in range(30)]
            assert store.calls.started == 1
            wait_until(lambda: ended(pid),
                       timeout=10, what="the idle helper exits")
            assert store.calls.pid is None
            assert await store.get("n3", SecretKind.CLAIM) == "secret-3"  # on demand again
            assert store.calls.started == 2
        finally:
            store.close()
    asyncio.run(scenario())


def test_closing_the_store_ends_its_helper(file_keyring):
    async def scenario():
        store = SecretStore(home_id="hhome0001")
        await store.get("n1", SecretKind.CLAIM)
        assert isinstance(store.calls, HelperCalls)
        pid = store.calls.pid
        assert pid is not None
        store.close()
        wait_until(lambda: ended(pid),
                   timeout=10, what="the helper exits with the store")
    asyncio.run(scenario())


def test_a_helper_killed_during_a_read_makes_the_gate_wait_for_the_keyring_never_a_missing_secret():
    killed = [sys.executable, "-c", "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGKILL)"]

    async def scenario():
        gate = KeyringGate(SecretStore(calls=HelperCalls(killed)), sleep=lambda s: asyncio.sleep(3600))
        try:
            with pytest.raises(KeyringUnavailable):
                await gate.load("n1", SecretKind.CLAIM)
            assert gate.condition is not None and gate.condition.code == "keyring_unavailable"
            assert not gate.is_missing("n1", SecretKind.CLAIM)
        finally:
            await gate.close()
            gate.secrets.close()
    asyncio.run(scenario())


def test_the_engine_reading_a_secret_never_loads_the_keyring_library(file_keyring):
    """The point of the helper (issue 26): the tray process never imports keyring, secretstorage,
    jeepney or cryptography; before it, the host imported keyring at start."""
    code = (
        "import asyncio, sys\n"
        "import cadre_desktop.host.host\n"
        "from cadre_desktop.host.core.vault.secrets import SecretStore, SecretKind\n"
        "async def main():\n"
        "    store = SecretStore(home_id='hhome0001')\n"
        "    await store.set('n1', SecretKind.CLAIM, 's3cret')\n"
        "    assert await store.get('n1', SecretKind.CLAIM) == 's3cret'\n"
        "    store.close()\n"
        "asyncio.run(main())\n"
        "heavy = {'keyring', 'secretstorage', 'jeepney', 'cryptography'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"
