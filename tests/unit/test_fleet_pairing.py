"""The pairing code (format, expiry, single use, bounded tries) and the SPAKE2 exchange, sans-IO."""

from __future__ import annotations

import pytest

from cadre_desktop.errors import Invalid
from cadre_desktop.host.fleet.pairing_code import MAX_TRIES, SECRET_LEN, VALID_S, CodeRefused, Invitations, parse_code
from cadre_desktop.host.fleet.pake import InviterSession, JoinerSession, PairingBroken

JOINER = {"id": "pc_joiner234567", "name": "laptop"}
INVITER = {"id": "pc_inviter23456", "name": "desktop"}


def opened(now: float = 0.0) -> tuple[Invitations, str]:
    book = Invitations()
    return book, str(book.open(now, "2026-01-01T00:10:00+00:00").code)


def run_to_identity(book: Invitations, code: str, now: float = 1.0) -> tuple[JoinerSession, InviterSession, dict]:
    joiner, inviter = JoinerSession(parse_code(code), JOINER), InviterSession(book, now)
    sealed = joiner.on_pake(inviter.on_hello(joiner.hello()))
    return joiner, inviter, sealed


def test_a_code_is_a_slot_and_eight_typable_characters():
    _, code = opened()
    slot, first, second = code.split("-")
    assert 1 <= int(slot) <= 99 and len(first + second) == SECRET_LEN
    assert not set(first + second) & set("01ilo")


def test_a_code_is_read_as_a_person_types_it():
    _, code = opened()
    assert parse_code(" " + code.upper().replace("-", " - ", 1) + " ") == parse_code(code)
    for bad in ("", "7", "7-ab3k", "0-abcd-efgh", "100-abcd-efgh", "7-abcd-efg0", None, 7):
        with pytest.raises(Invalid):
            parse_code(bad)


def test_the_right_code_pairs_both_sides_and_is_spent():
    book, code = opened()
    joiner, inviter, sealed = run_to_identity(book, code)
    assert inviter.on_identity(sealed) == JOINER
    theirs, confirm = joiner.on_sealed(inviter.answer(INVITER))
    assert theirs == INVITER
    inviter.on_confirm(confirm)
    assert not book.any_open
    with pytest.raises(CodeRefused):
        run_to_identity(book, code)  # single use


def test_a_wrong_code_is_refused_and_three_wrong_tries_burn_it():
    book, code = opened()
    slot = code.split("-")[0]
    wrong = f"{slot}-2222-2222" if not code.endswith("2222-2222") else f"{slot}-3333-3333"
    for left in range(MAX_TRIES - 1, -1, -1):
        _, inviter, sealed = run_to_identity(book, wrong)
        with pytest.raises(CodeRefused):
            inviter.on_identity(sealed)
        assert book.any_open == (left > 0)
    with pytest.raises(CodeRefused):
        run_to_identity(book, code)  # burnt: the right code too


def test_a_code_expires_after_ten_minutes():
    book, code = opened(now=100.0)
    run_to_identity(book, code, now=100.0 + VALID_S - 1)
    with pytest.raises(CodeRefused):
        run_to_identity(book, code, now=100.0 + VALID_S)


def test_a_replayed_transcript_meets_a_fresh_key_and_is_a_wrong_try():
    book, code = opened()
    joiner = JoinerSession(parse_code(code), JOINER)
    hello = joiner.hello()
    sealed = joiner.on_pake(InviterSession(book, 1.0).on_hello(hello))  # recorded; that try never finished
    replay = InviterSession(book, 2.0)
    replay.on_hello(hello)
    with pytest.raises(CodeRefused):
        replay.on_identity(sealed)
    assert book.any_open  # a wrong try, counted, not yet burnt


def test_the_joiner_refuses_an_answer_not_sealed_under_the_codes_key():
    book, code = opened()
    joiner, inviter, sealed = run_to_identity(book, code)
    inviter.on_identity(sealed)
    _, other, _ = run_to_identity(*opened())
    with pytest.raises(PairingBroken):
        joiner.on_sealed(other.answer(INVITER))


def test_frames_out_of_turn_or_broken_are_refused():
    book, code = opened()
    with pytest.raises(PairingBroken):
        InviterSession(book, 1.0).on_hello({"t": "hello", "v": 1, "slot": "7", "pake": ""})
    with pytest.raises(PairingBroken):
        InviterSession(book, 1.0).on_identity({"t": "sealed", "box": ""})
    joiner = JoinerSession(parse_code(code), JOINER)
    joiner.hello()
    with pytest.raises(PairingBroken):
        joiner.on_pake({"t": "pake", "pake": "not base64!"})
    with pytest.raises(CodeRefused):
        joiner.on_pake({"t": "refused", "message": "That pairing code is not open on this computer."})


def test_a_confirmation_is_needed_before_the_code_is_spent():
    book, code = opened()
    _, inviter, sealed = run_to_identity(book, code)
    inviter.on_identity(sealed)
    inviter.answer(INVITER)
    with pytest.raises(PairingBroken):
        inviter.on_confirm({"t": "sealed", "box": "AAAA"})
    assert book.any_open
