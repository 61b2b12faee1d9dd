"""The in-use condition against real desktops: X11's screen-saver extension on an Xvfb given
input by `xdotool`, and GNOME's idle monitor served on a session bus."""

from __future__ import annotations

import time

from cadre_desktop.host.conditions import idle
from cadre_desktop.host.conditions.source import Reading
from tests.support.idle_desktop import bare_xvfb, move_pointer, serve_idle_monitor
from tests.support.polling import async_wait_until, wait_until


def test_x11_idle_grows_while_nothing_happens_and_drops_after_a_pointer_move():
    lib = idle.XssLib()
    with bare_xvfb() as display:
        first = lib.idle_ms(display)
        later = wait_until(lambda: (ms := lib.idle_ms(display)) >= first + 400 and ms, timeout=10, what="idle to grow")
        move_pointer(display, 10, 10)
        assert lib.idle_ms(display) < later - 300, "input resets the idle time"


async def test_the_in_use_source_on_x11_reads_in_use_then_idle_then_in_use_again():
    started = time.monotonic()
    with bare_xvfb() as display:
        # a threshold of 0.6 s, polled every 50 ms
        source = idle.idle_source(0.01, "linux", env={"DISPLAY": display}, interval_s=0.05)
        heard: list[Reading] = []
        await source.start(heard.append)
        try:
            move_pointer(display, 5, 5)
            await async_wait_until(lambda: heard and heard[-1].value is True, what="in use after input")
            assert heard[-1].source == "the X11 screen-saver extension"
            await async_wait_until(lambda: heard[-1].value is False, what="idle after 0.6 s without input")
            assert heard[-1].detail.startswith("idle for ")
            move_pointer(display, 50, 50)
            await async_wait_until(lambda: heard[-1].value is True, what="in use again after a move")
        finally:
            await source.stop()
    assert time.monotonic() - started < 30


async def test_a_gone_display_reads_unknown_and_the_source_lives_on():
    with bare_xvfb() as display:
        source = idle.idle_source(3, "linux", env={"DISPLAY": display}, interval_s=0.05, retry_s=0.05,
                                  backends=[idle.X11Idle(display)])
        await source.start(lambda _r: None)
        assert source.reading().value is True
    try:
        await async_wait_until(lambda: source.reading().value is None, what="unknown once the X server is gone")
        assert "cannot open display" in source.reading().detail
    finally:
        await source.stop()


async def test_gnomes_idle_monitor_on_the_session_bus(secret_service):
    address = secret_service["DBUS_SESSION_BUS_ADDRESS"]
    bus, monitor = await serve_idle_monitor(address, idle_ms=240_000)
    session = idle.SessionBus(connect=lambda: _connect(address))
    source = idle.idle_source(3, backends=idle.session_ways(session), interval_s=0.05)
    heard: list[Reading] = []
    try:
        await source.start(heard.append)
        assert heard == [Reading(False, "GNOME's idle monitor on the session D-Bus", "idle for 4 min")]
        monitor.idle_ms = 1_500
        await async_wait_until(lambda: heard[-1].value is True, what="in use heard")
        assert heard[-1].detail == "in use (last input 1 s ago)"
    finally:
        await source.stop()
        bus.disconnect()


async def _connect(address):
    from dbus_fast.aio import MessageBus

    return await MessageBus(bus_address=address).connect()
