"""One check for text from outside, and the escaping every terminal output goes through."""

import pytest

from cadre_desktop import text

#: What a hostile inviter or node might send: a title change, a bell, a screen clear,
#: a colour, a cursor move, a bidi override, line breaks.
PAYLOADS = [
    "\x1b]0;pwned\x07", "\x07", "\x1b[2J\x1b[H", "\x1b[31mred\x1b[0m", "\x9b6n", "abc\u202eevil",
    "two\nlines", "carriage\rreturn", "tab\there", "\x00nul",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_strings_are_not_clean_and_escape_to_printable_text(payload):
    assert text.clean(payload, 100) is None
    escaped = text.escape(payload)
    assert escaped.isprintable()
    assert "\x1b" not in escaped and "\x07" not in escaped and "\n" not in escaped


def test_clean_accepts_printable_single_line_bounded_text_only():
    assert text.clean("Family Smith ✨", 64) == "Family Smith ✨"
    assert text.clean("x" * 65, 64) is None
    assert text.clean("", 64) is None and text.clean("", 64, allow_empty=True) == ""
    assert text.clean(42, 64) is None and text.clean(None, 64) is None


def test_escape_writes_each_character_visibly_and_bounds_the_result():
    assert text.escape("a\x1bb\x07c\u202e") == "a\\x1bb\\x07c\\u202e"
    assert text.escape("plain path C:\\dir") == "plain path C:\\dir"
    assert text.escape("y" * 50, 10) == "y" * 9 + "…"
    assert text.escape(None) == "None"


def test_escape_lines_keeps_line_breaks_and_tabs_only():
    assert text.escape_lines("one\r\ntwo\tx\x1b[2J\n") == "one\ntwo\tx\\x1b[2J\n"
