"""The in-use condition against real desktops: X11's screen-saver extension on an Xvfb given
input by `xdotool`, and GNOME's idle monitor served on a session bus."""

from __future__ import annotations

import time

import pytest

from cadre_desktop.host.conditions import idle, xwire
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


def _missing(name: str):
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


async def test_without_libxss_the_in_use_source_reads_x11_over_the_x_protocol():
    """Regression (issue 39): with no libxss1 installed (a fresh machine with what Qt needs), an X
    server offering the screen-saver extension read "unknown"."""
    no_libxss = idle.XssOrWire(idle.XssLib(load=_missing))
    with bare_xvfb() as display:
        source = idle.idle_source(0.01, "linux", env={"DISPLAY": display}, interval_s=0.05,
                                  backends=[idle.X11Idle(display, no_libxss)])
        heard: list[Reading] = []
        await source.start(heard.append)
        try:
            move_pointer(display, 5, 5)
            await async_wait_until(lambda: heard and heard[-1].value is True, what="in use after input")
            assert heard[-1].source == "the X11 screen-saver extension"
            await async_wait_until(lambda: heard[-1].value is False, what="idle after 0.6 s without input")
        finally:
            await source.stop()


def test_the_x_protocol_reads_the_same_idle_time_as_libxss():
    lib = idle.XssLib()
    with bare_xvfb() as display:
        move_pointer(display, 20, 20)
        first = xwire.idle_ms(display)
        by_lib = lib.idle_ms(display)
        assert abs(by_lib - first) < 2_000
        later = wait_until(lambda: (ms := xwire.idle_ms(display)) >= first + 400 and ms, timeout=10,
                           what="idle to grow")
        move_pointer(display, 30, 30)
        assert xwire.idle_ms(f"unix{display}.0") < later - 300, "input resets the idle time"


def test_the_x_protocol_authenticates_with_the_displays_cookie(tmp_path, monkeypatch):
    """A server that asks for MIT-MAGIC-COOKIE-1 (as a display manager's does) is answered with the
    cookie from XAUTHORITY, and refuses a client without it, in words."""
    import secrets
    import shutil
    import subprocess

    if shutil.which("xauth") is None:
        pytest.skip("xauth is missing; ./scripts/test installs it")
    auth = tmp_path / "Xauthority"
    cookie = secrets.token_hex(16)
    with bare_xvfb("-auth", str(auth)) as display:
        subprocess.run(["xauth", "-f", str(auth), "add", display, "MIT-MAGIC-COOKIE-1", cookie], check=True,
                       timeout=10, capture_output=True)
        monkeypatch.setenv("XAUTHORITY", str(tmp_path / "none"))
        with pytest.raises(OSError, match="refused the connection"):
            xwire.idle_ms(display)
        wrong = tmp_path / "wrong"
        subprocess.run(["xauth", "-f", str(wrong), "add", display, "MIT-MAGIC-COOKIE-1", "f" * 32], check=True,
                       timeout=10, capture_output=True)
        monkeypatch.setenv("XAUTHORITY", str(wrong))
        with pytest.raises(OSError, match="refused the connection: Invalid MIT-MAGIC-COOKIE-1"):
            xwire.idle_ms(display)
        monkeypatch.setenv("XAUTHORITY", str(auth))
        assert xwire.idle_ms(display) >= 0
