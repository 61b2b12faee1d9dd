"""The in-use condition: each way of reading the person's idle time over a fake OS seam, the
order they are tried in, the threshold, and a way that stops answering."""

from __future__ import annotations

import pytest

from cadre_desktop.host.conditions import idle
from cadre_desktop.host.conditions.source import Reading
from tests.support.clock import FakeClock, settle
from tests.support.polling import async_wait_until


class FakeWay:
    def __init__(self, label, *answers):
        self.label = label
        self.answers = list(answers)
        self.asked = 0
        self.closed = False

    async def idle_ms(self):
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self):
        self.closed = True


class FakeXss:
    def __init__(self, answer):
        self.answer = answer
        self.displays: list[str] = []

    def idle_ms(self, display_name):
        self.displays.append(display_name)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_in_use_while_idle_is_below_the_threshold():
    assert idle.idle_reading(179_999, 180_000, "X") == Reading(True, "X", "in use (last input 2 min ago)")
    assert idle.idle_reading(180_000, 180_000, "X") == Reading(False, "X", "idle for 3 min")
    assert idle.idle_reading(12_500, 180_000, "X").detail == "in use (last input 12 s ago)"
    assert idle.words(2 * 3600_000 + 5 * 60_000) == "2 h 5 min"


async def test_x11_asks_the_screen_saver_extension_of_display():
    xss = FakeXss(4200)
    way = idle.X11Idle(":5", xss)
    assert await way.idle_ms() == 4200 and xss.displays == [":5"]
    with pytest.raises(OSError, match="no DISPLAY"):
        await idle.X11Idle(None, xss).idle_ms()


def test_x11_comes_first_on_an_x11_session_and_last_on_wayland():
    x11_first = idle.linux_ways({"DISPLAY": ":0"}, FakeXss(0))
    assert [w.label for w in x11_first] == ["the X11 screen-saver extension", "GNOME's idle monitor on the session D-Bus",
                                            "org.freedesktop.ScreenSaver on the session D-Bus"]
    wayland = idle.linux_ways({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, FakeXss(0))
    assert wayland[-1].label == "the X11 screen-saver extension"
    assert idle.linux_ways({"XDG_SESSION_TYPE": "wayland"})[0].label == "GNOME's idle monitor on the session D-Bus"


async def test_session_bus_ways_call_their_method_and_refuse_a_wrong_answer():
    calls = []

    async def caller(*method):
        calls.append(method)
        return [61_000] if method[3] == "GetIdletime" else ["soon"]

    mutter = idle.DbusIdle("GNOME", idle.MUTTER, caller)
    screensaver = idle.DbusIdle("ScreenSaver", idle.SCREENSAVER, caller)
    assert await mutter.idle_ms() == 61_000
    with pytest.raises(OSError, match="GetSessionIdleTime answered str"):
        await screensaver.idle_ms()
    assert calls == [idle.MUTTER, idle.SCREENSAVER]
    assert idle.MUTTER[:2] == ("org.gnome.Mutter.IdleMonitor", "/org/gnome/Mutter/IdleMonitor/Core")


@pytest.mark.parametrize("now, last, expected", [(5_000, 1_000, 4_000), (500, 0xFFFFFF00, 756), (7, 7, 0)])
def test_windows_idle_across_the_tick_counts_wrap(now, last, expected):
    assert idle.ticks_idle_ms(now, last) == expected


async def test_windows_reads_get_last_input_info_through_its_seam():
    class Ticks:
        def ticks(self):
            return 10_000, 4_000

    assert await idle.WindowsIdle(Ticks()).idle_ms() == 6_000
    assert [w.label for w in idle.platform_ways("win32", {})] == ["GetLastInputInfo"]


async def test_macos_reads_hid_idle_time_from_ioreg():
    out = '+-o IOHIDSystem  <class IOHIDSystem>\n    | "HIDIdleTime" = 7500000000\n    | "HIDKeyboard" = 1\n'
    assert await idle.MacIdle(lambda: out).idle_ms() == 7_500
    with pytest.raises(OSError, match="no HIDIdleTime"):
        idle.parse_hid_idle_ms("+-o IOHIDSystem\n")
    assert [w.label for w in idle.platform_ways("darwin", {})] == ["the HID idle time (ioreg)"]


async def test_the_first_way_that_answers_is_kept_and_one_that_fails_gives_way_to_the_next():
    x11 = FakeWay("x11", OSError("no DISPLAY"), OSError("no DISPLAY"), 5_000)
    mutter = FakeWay("mutter", 1_000, OSError("gone"), OSError("gone"))
    probe = idle.IdleProbe([x11, mutter], 180_000)
    assert await probe() == Reading(True, "mutter", "in use (last input 1 s ago)")
    assert probe.chosen is mutter and (x11.asked, mutter.asked) == (1, 1)
    # the kept way fails: every way is asked again, in order
    unknown = await probe()
    assert unknown.value is None and probe.chosen is None
    assert unknown.detail == "no idle time on this desktop (mutter: OSError: gone; x11: OSError: no DISPLAY)"
    assert await probe() == Reading(True, "x11", "in use (last input 5 s ago)")
    await probe.close()
    assert x11.closed and mutter.closed


async def test_the_source_polls_every_interval_and_tells_in_use_then_idle():
    clock = FakeClock()
    way = FakeWay("x11", 2_000, 190_000)
    source = idle.idle_source(3, backends=[way], clock=clock)
    heard: list[Reading] = []
    await source.start(heard.append)
    await settle()
    try:
        assert heard == [Reading(True, "x11", "in use (last input 2 s ago)")]
        await clock.run_for(idle.POLL_S)
        await async_wait_until(lambda: len(heard) == 2, what="idle heard")
        assert heard[-1] == Reading(False, "x11", "idle for 3 min")
    finally:
        await source.stop()
    assert way.closed


async def test_no_way_at_all_is_unknown_and_start_does_not_raise():
    source = idle.idle_source(3, backends=[])
    await source.start(lambda _r: None)
    try:
        assert source.reading() == Reading(None, idle.SOURCE, "no way to read the idle time on this platform")
    finally:
        await source.stop()


@pytest.mark.parametrize("display, parsed", [
    (":0", ("", "0")), (":1.0", ("", "1")), ("unix:2", ("", "2")), ("localhost:10.0", ("localhost", "10")),
    ("/private/tmp/com.apple.launchd.x/org.xquartz:0", ("/private/tmp/com.apple.launchd.x/org.xquartz", "0")),
])
def test_display_names_are_read_as_xlib_reads_them(display, parsed):
    from cadre_desktop.host.conditions import xwire

    assert xwire.parse_display(display) == parsed


def test_a_display_name_that_is_none_is_an_os_error():
    from cadre_desktop.host.conditions import xwire

    with pytest.raises(OSError, match="cannot read the display name"):
        xwire.parse_display("nonsense")


def _auth_entry(family: int, address: bytes, number: bytes, name: bytes, data: bytes) -> bytes:
    import struct

    return struct.pack(">H", family) + b"".join(struct.pack(">H", len(f)) + f for f in (address, number, name, data))


def test_the_cookie_is_this_displays_on_this_host_or_a_wildcards(tmp_path):
    from cadre_desktop.host.conditions import xwire

    auth = tmp_path / "Xauthority"
    cookie = xwire.COOKIE
    auth.write_bytes(_auth_entry(256, b"otherhost", b"0", cookie, b"theirs")
                     + _auth_entry(256, b"here", b"1", cookie, b"display-one")
                     + _auth_entry(256, b"here", b"0", b"XDM-AUTHORIZATION-1", b"not-a-cookie")
                     + _auth_entry(256, b"here", b"0", cookie, b"ours")
                     + _auth_entry(0xFFFF, b"", b"7", cookie, b"wild")
                     + b"\x01\x00\x00")  # a cut-off entry at the end is ignored
    assert xwire.read_cookie("0", auth, "here") == b"ours"
    assert xwire.read_cookie("1", auth, "here") == b"display-one"
    assert xwire.read_cookie("7", auth, "anywhere") == b"wild"
    assert xwire.read_cookie("3", auth, "here") == b""
    assert xwire.read_cookie("0", tmp_path / "missing", "here") == b""


def test_without_libxss_the_x11_way_asks_the_x_protocol():
    """Regression (issue 39): no libxss1 read unknown on an X server with the extension."""
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    asked: list[str] = []

    def wire(display: str) -> int:
        asked.append(display)
        return 1234

    way = idle.XssOrWire(idle.XssLib(load=missing), wire=wire)
    assert way.idle_ms(":3") == 1234 and asked == [":3"]

    class Installed(FakeXss):
        def available(self) -> bool:
            return True

    def no_wire(display: str) -> int:
        raise AssertionError("libXss is installed: the protocol is not asked")

    assert idle.XssOrWire(Installed(77), wire=no_wire).idle_ms(":3") == 77
