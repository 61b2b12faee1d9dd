"""The invitation string: round trip, and malformed input refused without a leak."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadre_desktop.node.cadre.invitation_code import PREFIX, InvitationCode, MalformedInvitation, parse_invitation
from cadre_desktop.wire.keys import b64url

CODE = InvitationCode("192.168.1.20", 47001, "inv-abcdefgh", "S" * 43, "cn1peer")


def test_round_trip() -> None:
    text = CODE.encode()
    assert text.startswith(PREFIX)
    assert parse_invitation(f"  {text}\n") == CODE


def test_an_ipv6_host_round_trips() -> None:
    code = InvitationCode("fe80::1", 8080, "inv-abcdefgh", "S" * 43, "cn1peer")
    assert parse_invitation(code.encode()) == code


def test_repr_hides_the_secret() -> None:
    assert "S" * 43 not in repr(CODE)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "cadre-inv2.e30",
        PREFIX + "!!!",
        PREFIX + b64url(b"[1]"),
        PREFIX + b64url(b'{"host": "h", "port": 0, "id": "abcdefgh", "secret": "x"}'),
        PREFIX + "A" * 5000,
    ],
)
def test_malformed_strings_are_refused(text: str) -> None:
    with pytest.raises(MalformedInvitation):
        parse_invitation(text)


@pytest.mark.slow
@given(st.text(max_size=300))
def test_any_text_is_either_an_invitation_or_malformed(text: str) -> None:
    try:
        parse_invitation(text)
    except MalformedInvitation as err:  # the message never quotes the input
        assert len(text.strip()) < 12 or text.strip() not in str(err)


@given(st.binary(max_size=200))
def test_any_body_is_either_an_invitation_or_malformed(body: bytes) -> None:
    try:
        parse_invitation(PREFIX + b64url(body))
    except MalformedInvitation:
        pass
