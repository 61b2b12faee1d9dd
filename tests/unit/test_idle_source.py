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
