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


HOSTS = ["192.168.1.5", "::1", "fe80::1%eth0", "nas.local", "nas.local.", "a-b.example.org", "x" * 63 + ".example"]
NOT_HOSTS = ["", "my_host", "nås.local", "a..b", "-lead.example", "x" * 64 + ".example", "a" * 254,
             "http://x/", "host:80", "two words", "evil\x1b"]


@pytest.mark.parametrize("value", HOSTS + NOT_HOSTS)
def test_settings_accept_exactly_the_addresses_the_node_accepts(value):
    """One rule (text.is_host): an advertise_host the settings take is one the node starts with."""
    from cadre_desktop.errors import CadreError
    from cadre_desktop.node.config import _host
    from cadre_desktop.node.errors import ConfigError
    from cadre_desktop.settings import parse_settings

    try:
        parse_settings({"advertise_host": value}, "settings.json")
        settings_ok = True
    except CadreError:
        settings_ok = False
    try:
        _host({"CADRE_ADVERTISE_HOST": value}, "CADRE_ADVERTISE_HOST")
        node_ok = True
    except ConfigError:
        node_ok = False
    assert settings_ok == node_ok == (value in HOSTS) == text.is_host(value)


@pytest.mark.parametrize("host, written", [
    ("127.0.0.1", "127.0.0.1"), ("cadre.local", "cadre.local"),
    ("::1", "[::1]"), ("fe80::1", "[fe80::1]"), ("[::1]", "[::1]"),
])
def test_an_ipv6_literal_is_bracketed_where_a_url_or_host_header_names_it(host, written):
    assert text.url_host(host) == written


def test_log_lines_keep_the_last_lines_each_and_all_bounded_and_printable():
    lines = [f"l{i}" for i in range(1000)] + [7, None, "\x1b[2Jbad\r\n", "y" * 9000]
    kept = text.log_lines(lines, 5, line_chars=100, total_chars=10_000)
    assert kept[:2] == ["l999", "\\x1b[2Jbad"] and len(kept) == 3  # the last 5 entries, 7 and None dropped
    assert len(kept[2]) == 100 and kept[2].endswith("…")
    assert all(line.isprintable() for line in kept)
    assert text.log_lines(["a" * 50] * 10, 10, total_chars=120) == ["a" * 50] * 2  # the oldest dropped first
    assert text.log_lines("not a list") == [] and text.log_lines({"lines": []}) == []
