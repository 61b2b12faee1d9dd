"""In use: has the person touched this computer within `in_use_idle_minutes` (`pause_when_in_use`)?

The person's idle time (since their last key press or pointer move), asked every `POLL_S`
(each a cheap call) and turned into a reading: in use (True) while the idle time is below the
threshold. Where it comes from, each behind a seam tests replace:

- Linux on X11: the screen-saver extension (`XScreenSaverQueryInfo`, ctypes on libXss.so.1 and
  libX11.so.6; needs `DISPLAY`). The display is opened for each question and closed after it, on
  a worker thread: an X server that went away (a logout) is then a failed open, which reads
  unknown, rather than Xlib's I/O error handler, which ends the process, on a kept connection.
  Where libXss is not installed, the same request goes over the X protocol itself (`xwire.py`).
- Linux on Wayland (or an X11 desktop without the extension): GNOME's
  `org.gnome.Mutter.IdleMonitor.GetIdletime` or `org.freedesktop.ScreenSaver.GetSessionIdleTime`
  (KDE and others) on the session D-Bus. On a Wayland session these come first, since X11 there
  (XWayland) sees only its own clients' input.
- Windows: `GetLastInputInfo` and `GetTickCount` (ctypes; the tick count wraps after 49.7 days).
- macOS: `HIDIdleTime` of `IOHIDSystem` (nanoseconds), read from `ioreg -c IOHIDSystem -d 4`
  (a small child process every `POLL_S`; IOKit through ctypes could replace it).

The first way that answers is kept; when it stops answering the others are tried again, and
with none the reading is unknown (it never stops a node) and tried again every `retry_s`.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from cadre_desktop.host.conditions import xwire
from cadre_desktop.host.conditions.dbusprop import call, session_bus
from cadre_desktop.host.conditions.polled import PolledSource, Worker, why
from cadre_desktop.host.conditions.source import Reading
from cadre_desktop.host.core.clock import Clock

if TYPE_CHECKING:
    from dbus_fast.aio import MessageBus

NAME = "in_use"
SOURCE = "the desktop's idle time"
#: How often the idle time is asked (each a cheap call).
POLL_S = 10.0
#: How long connecting to the session bus, or one call on it, may take.
CALL_TIMEOUT_S = 2.0


class IdleBackend(Protocol):
    """One way to read the person's idle time; `label` says where from, in words."""

    label: str

    async def idle_ms(self) -> int:
        """Milliseconds since the person's last input; raises (OSError, anything) when it cannot say."""
        ...

    async def close(self) -> None:
        ...


def words(ms: int) -> str:
    """An idle time in words: "12 s", "4 min", "2 h 5 min"."""
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def idle_reading(idle_ms: int, threshold_ms: int, label: str) -> Reading:
    """In use while the idle time is below the threshold."""
    if idle_ms < threshold_ms:
        return Reading(True, label, f"in use (last input {words(idle_ms)} ago)")
    return Reading(False, label, f"idle for {words(idle_ms)}")


# -- X11 ------------------------------------------------------------------------------------


class XScreenSaverInfo(ctypes.Structure):
    _fields_ = [("window", ctypes.c_ulong), ("state", ctypes.c_int), ("kind", ctypes.c_int),
                ("til_or_since", ctypes.c_ulong), ("idle", ctypes.c_ulong), ("eventMask", ctypes.c_ulong)]


class XssLib:
    """XScreenSaverQueryInfo through ctypes (libX11.so.6, libXss.so.1; loaded at the first question)."""

    def __init__(self, load: Callable[[str], ctypes.CDLL] = ctypes.CDLL) -> None:
        self._libs: tuple[ctypes.CDLL, ctypes.CDLL] | None = None
        self._loader = load

    def available(self) -> bool:
        """Both libraries load (libXss is a package of its own: libxss1)."""
        try:
            self._load()
        except OSError:
            return False
        return True

    def _load(self) -> tuple[ctypes.CDLL, ctypes.CDLL]:
        if self._libs is None:
            x11, xss = self._loader("libX11.so.6"), self._loader("libXss.so.1")
            x11.XOpenDisplay.argtypes, x11.XOpenDisplay.restype = [ctypes.c_char_p], ctypes.c_void_p
            x11.XDefaultRootWindow.argtypes, x11.XDefaultRootWindow.restype = [ctypes.c_void_p], ctypes.c_ulong
            x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
            x11.XFree.argtypes = [ctypes.c_void_p]
            xss.XScreenSaverQueryExtension.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                                                       ctypes.POINTER(ctypes.c_int)]
            xss.XScreenSaverAllocInfo.restype = ctypes.POINTER(XScreenSaverInfo)
            xss.XScreenSaverQueryInfo.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.POINTER(XScreenSaverInfo)]
            self._libs = (x11, xss)
        return self._libs

    def idle_ms(self, display_name: str) -> int:
        """The X server's idle time; OSError when the libraries, the display or the extension are missing."""
        x11, xss = self._load()
        display = x11.XOpenDisplay(display_name.encode())
        if not display:
            raise OSError(f"cannot open display {display_name}")
        try:
            event, error = ctypes.c_int(), ctypes.c_int()
            if not xss.XScreenSaverQueryExtension(display, ctypes.byref(event), ctypes.byref(error)):
                raise OSError(f"display {display_name} has no MIT-SCREEN-SAVER extension")
            info = xss.XScreenSaverAllocInfo()
            if not info:
                raise OSError("XScreenSaverAllocInfo failed")
            try:
                if not xss.XScreenSaverQueryInfo(display, x11.XDefaultRootWindow(display), info):
                    raise OSError("XScreenSaverQueryInfo failed")
                return int(info.contents.idle)
            finally:
                x11.XFree(info)
        finally:
            x11.XCloseDisplay(display)


class XssQuery(Protocol):
    def idle_ms(self, display_name: str) -> int: ...


class LoadableXss(XssQuery, Protocol):
    def available(self) -> bool: ...


class XssOrWire:
    """libXss where it is installed, else the same question in the X protocol itself
    (`xwire.idle_ms`): an X server that offers the extension answers either way (issue 39:
    without libxss1 the idle time read unknown)."""

    def __init__(self, lib: LoadableXss | None = None, wire: Callable[[str], int] = xwire.idle_ms) -> None:
        self._lib: LoadableXss = lib or XssLib()
        self._wire = wire
        self._use_lib: bool | None = None

    def idle_ms(self, display_name: str) -> int:
        if self._use_lib is None:
            self._use_lib = self._lib.available()
        return self._lib.idle_ms(display_name) if self._use_lib else self._wire(display_name)


class X11Idle:
    label = "the X11 screen-saver extension"

    def __init__(self, display: str | None, lib: XssQuery | None = None) -> None:
        self.display = display
        self._lib: XssQuery = lib or XssOrWire()
        self._worker = Worker("x11-idle")

    async def idle_ms(self) -> int:
        if not self.display:
            raise OSError("no DISPLAY")
        display = self.display
        return await self._worker.run(lambda: self._lib.idle_ms(display))

    async def close(self) -> None:
        return None


# -- the session D-Bus ------------------------------------------------------------------------


class SessionBus:
    """One connection to the session bus, shared by the D-Bus ways, made at the first question and
    made again after it drops."""

    def __init__(self, connect: Callable[[], Awaitable[MessageBus]] = session_bus) -> None:
        self._connect = connect
        self._bus: MessageBus | None = None

    async def call(self, destination: str, path: str, interface: str, member: str) -> list[object]:
        if self._bus is None or not self._bus.connected:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                self._bus = await self._connect()
        return await call(self._bus, destination, path, interface, member, timeout_s=CALL_TIMEOUT_S)

    async def close(self) -> None:
        bus, self._bus = self._bus, None
        if bus is not None and bus.connected:
            bus.disconnect()


Caller = Callable[[str, str, str, str], Awaitable[list[object]]]


class DbusIdle:
    """An idle time from a method of a desktop service on the session bus (in milliseconds)."""

    def __init__(self, label: str, method: tuple[str, str, str, str], caller: Caller,
                 close: Callable[[], Awaitable[None]] | None = None) -> None:
        self.label = label
        self.method = method
        self._caller = caller
        self._close = close

    async def idle_ms(self) -> int:
        body = await self._caller(*self.method)
        value = body[0] if body else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise OSError(f"{self.method[3]} answered {type(value).__name__}, not a number of milliseconds")
        return value

    async def close(self) -> None:
        if self._close is not None:
            await self._close()


MUTTER = ("org.gnome.Mutter.IdleMonitor", "/org/gnome/Mutter/IdleMonitor/Core", "org.gnome.Mutter.IdleMonitor",
          "GetIdletime")
SCREENSAVER = ("org.freedesktop.ScreenSaver", "/org/freedesktop/ScreenSaver", "org.freedesktop.ScreenSaver",
               "GetSessionIdleTime")


def session_ways(bus: SessionBus) -> list[DbusIdle]:
    """GNOME's idle monitor, then the freedesktop screen saver (KDE and others), on one connection."""
    return [DbusIdle("GNOME's idle monitor on the session D-Bus", MUTTER, bus.call, bus.close),
            DbusIdle("org.freedesktop.ScreenSaver on the session D-Bus", SCREENSAVER, bus.call)]


# -- Windows ----------------------------------------------------------------------------------


class InputTicks(Protocol):
    def ticks(self) -> tuple[int, int]:
        """(GetTickCount(), the tick of the last input), both milliseconds modulo 2**32."""
        ...


class WindowsTicks:
    def ticks(self) -> tuple[int, int]:
        class LastInputInfo(ctypes.Structure):
            _fields_ = [("cbSize", ctypes.c_uint), ("dwTime", ctypes.c_uint)]

        # Left untyped: ctypes has windll on Windows only, so mypy (run elsewhere) knows nothing of it.
        windll: Any = getattr(ctypes, "windll")  # noqa: B009
        info = LastInputInfo(ctypes.sizeof(LastInputInfo), 0)
        if not windll.user32.GetLastInputInfo(ctypes.byref(info)):
            raise OSError("GetLastInputInfo failed")
        return int(windll.kernel32.GetTickCount()) & 0xFFFFFFFF, int(info.dwTime)


def ticks_idle_ms(now: int, last_input: int) -> int:
    """Milliseconds between two 32-bit tick counts, across the count's wrap."""
    return (now - last_input) & 0xFFFFFFFF


class WindowsIdle:
    label = "GetLastInputInfo"

    def __init__(self, ticks: InputTicks | None = None) -> None:
        self._ticks: InputTicks = ticks or WindowsTicks()
        self._worker = Worker("windows-idle")

    async def idle_ms(self) -> int:
        now, last = await self._worker.run(self._ticks.ticks)
        return ticks_idle_ms(now, last)

    async def close(self) -> None:
        return None


# -- macOS ------------------------------------------------------------------------------------

HID_IDLE = re.compile(r'"HIDIdleTime"\s*=\s*(\d+)')


def parse_hid_idle_ms(text: str) -> int:
    """`HIDIdleTime` (nanoseconds) from ioreg's output, in milliseconds."""
    found = HID_IDLE.search(text)
    if found is None:
        raise OSError("ioreg shows no HIDIdleTime")
    return int(found.group(1)) // 1_000_000


def run_ioreg() -> str:
    done = subprocess.run(["ioreg", "-c", "IOHIDSystem", "-d", "4"], capture_output=True, text=True, timeout=5,
                          check=False)
    if done.returncode != 0:
        raise OSError(f"ioreg exited {done.returncode}")
    return done.stdout


class MacIdle:
    label = "the HID idle time (ioreg)"

    def __init__(self, ioreg: Callable[[], str] = run_ioreg) -> None:
        self._ioreg = ioreg
        self._worker = Worker("mac-idle")

    async def idle_ms(self) -> int:
        return parse_hid_idle_ms(await self._worker.run(self._ioreg))

    async def close(self) -> None:
        return None


# -- choosing -------------------------------------------------------------------------------


class IdleProbe:
    """The kept way asked first; when it fails, every way in order; none: unknown, with each why."""

    def __init__(self, backends: Sequence[IdleBackend], threshold_ms: int) -> None:
        self.backends = list(backends)
        self.threshold_ms = threshold_ms
        self.chosen: IdleBackend | None = None

    async def __call__(self) -> Reading:
        failures: list[str] = []
        order = ([self.chosen] if self.chosen else []) + [b for b in self.backends if b is not self.chosen]
        for backend in order:
            try:
                idle = await backend.idle_ms()
            except Exception as exc:  # each way's own errors (ctypes, D-Bus, a child process): try the next
                failures.append(f"{backend.label}: {why(exc)}")
                if backend is self.chosen:
                    self.chosen = None
                continue
            self.chosen = backend
            return idle_reading(idle, self.threshold_ms, backend.label)
        return Reading(None, SOURCE, "no idle time on this desktop (" + "; ".join(failures) + ")"
                       if failures else "no way to read the idle time on this platform")

    async def close(self) -> None:
        for backend in self.backends:
            await backend.close()


def linux_ways(env: Mapping[str, str], xss: XssQuery | None = None, bus: SessionBus | None = None) -> list[IdleBackend]:
    x11 = X11Idle(env.get("DISPLAY") or None, xss)
    dbus: list[IdleBackend] = list(session_ways(bus or SessionBus()))
    wayland = bool(env.get("WAYLAND_DISPLAY")) or env.get("XDG_SESSION_TYPE") == "wayland"
    return [*dbus, x11] if wayland else [x11, *dbus]


def platform_ways(platform: str, env: Mapping[str, str]) -> list[IdleBackend]:
    if platform == "win32":
        return [WindowsIdle()]
    if platform == "darwin":
        return [MacIdle()]
    return linux_ways(env)


def idle_source(idle_minutes: float, platform: str = sys.platform, *, env: Mapping[str, str] | None = None,
                backends: Sequence[IdleBackend] | None = None, interval_s: float = POLL_S, retry_s: float = 60.0,
                clock: Clock | None = None) -> PolledSource:
    """The in-use source: in use while the idle time is below `idle_minutes`."""
    ways = list(backends) if backends is not None else platform_ways(platform, os.environ if env is None else env)
    probe = IdleProbe(ways, int(idle_minutes * 60_000))
    return PolledSource(NAME, probe, Reading(None, SOURCE, "not read yet"), interval_s=interval_s, retry_s=retry_s,
                        clock=clock, on_stop=probe.close)
