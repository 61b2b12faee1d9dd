"""A keyring whose service ends in the middle of a call (gnome-keyring 42 aborts when another
client leaves in the middle of a call; the session bus starts it again on the next call): the
call is sent once more, and a second end is "unavailable" (the gate tries again), never a
failure a person must act on. Seen in side-by-side runs as "InitError: Failed to create the
collection: Message recipient disconnected from message bus without replying."""

from __future__ import annotations

import keyring.errors
import pytest

from cadre_desktop.errors import SecretsError
from cadre_desktop.keyrings.keyring_calls import BackendCalls
from cadre_desktop.keyrings.keyring_names import KeyringUnavailable, SecretKind, Where
from tests.support.keyrings import MemoryKeyring

WHERE = Where("h0123456789abcdef", False)
BUS_SAYS = "Message recipient disconnected from message bus without replying."


class EndingKeyring(MemoryKeyring):
    """Its service ends during the next `ends` calls, as the Secret Service backend says it:
    an InitError raised while handling the bus's NoReply."""

    def __init__(self, ends: int, words: str = BUS_SAYS) -> None:
        super().__init__()
        self.ends, self.words = ends, words

    def _enter(self) -> None:
        super()._enter()
        if self.ends:
            self.ends -= 1
            try:
                raise RuntimeError(self.words)  # what secretstorage raised
            except RuntimeError as exc:
                raise keyring.errors.InitError(f"Failed to create the collection: {exc}") from exc


def test_a_write_whose_keyring_ended_mid_call_is_sent_once_more_and_kept():
    backend = EndingKeyring(ends=1)
    calls = BackendCalls(backend)
    calls.set(WHERE, "n1", SecretKind.CLAIM, "s3cret-value")
    assert calls.get(WHERE, "n1", SecretKind.CLAIM) == "s3cret-value"
    assert backend.ends == 0


def test_a_read_whose_keyring_ended_mid_call_is_answered_by_the_next_one():
    backend = EndingKeyring(ends=0)
    calls = BackendCalls(backend)
    calls.set(WHERE, "n1", SecretKind.CLAIM, "s3cret-value")
    backend.ends = 1
    assert calls.get(WHERE, "n1", SecretKind.CLAIM) == "s3cret-value"


def test_a_keyring_that_ends_twice_is_unavailable_never_missing_and_never_says_the_secret():
    calls = BackendCalls(EndingKeyring(ends=2))
    with pytest.raises(KeyringUnavailable) as raised:
        calls.set(WHERE, "n1", SecretKind.CLAIM, "s3cret-value")
    assert "ended in the middle of a call" in raised.value.message
    assert "s3cret-value" not in raised.value.message


def test_any_other_failure_is_asked_once():
    backend = EndingKeyring(ends=1, words="org.freedesktop.DBus.Error.AccessDenied: no")
    calls = BackendCalls(backend)
    with pytest.raises(SecretsError) as raised:
        calls.set(WHERE, "n1", SecretKind.CLAIM, "s3cret-value")
    assert not isinstance(raised.value, KeyringUnavailable)
    assert backend.calls == 1
