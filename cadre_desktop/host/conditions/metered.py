"""On a metered network: does the connection cost by the byte now (`pause_on_metered_network`)?

Linux: NetworkManager's `Metered` on `org.freedesktop.NetworkManager` at
`/org/freedesktop/NetworkManager` over the system D-Bus, following its `PropertiesChanged`
(NM_METERED: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no; a guess counts as what it
guesses, as GNOME does). No NetworkManager reads unknown and is tried again.

Windows: the connection cost of the Network List Manager (`INetworkCostManager::GetCost`, COM
through ctypes, no extra package) asked every `POLL_S` on a worker thread; fixed or variable
cost, roaming and over the data limit count as metered, unrestricted not, and "unknown" is
unknown. `WindowsCost` is the seam tests replace; this path has not run on a Windows machine
in this project's tests yet.

macOS: unknown. Its expensive/constrained path is `NWPathMonitor` (Network.framework), which
answers through blocks on a dispatch queue; nothing as cheap as ctypes reaches it, so it is not
read and `detail` says so.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from cadre_desktop.host.conditions.dbusprop import Connect, Property, PropertyWatch, system_bus
from cadre_desktop.host.conditions.polled import PolledSource, Unreadable, Worker
from cadre_desktop.host.conditions.source import ConditionSource, Reading
from cadre_desktop.host.core.clock import Clock

NAME = "metered"
NM = Property("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", "org.freedesktop.NetworkManager",
              "Metered")
NM_SOURCE = "NetworkManager over the system D-Bus"
WINDOWS_SOURCE = "the connection cost (Network List Manager)"
MACOS_SOURCE = "macOS"
#: How often Windows is asked.
POLL_S = 60.0

#: NM_METERED: the value, and what it says.
NM_METERED: dict[int, tuple[bool | None, str]] = {
    0: (None, "NetworkManager does not know"),
    1: (True, "metered"),
    2: (False, "not metered"),
    3: (True, "metered (NetworkManager's guess)"),
    4: (False, "not metered (NetworkManager's guess)"),
}

# NLM_CONNECTION_COST flags (netlistmgr.h).
COST_UNRESTRICTED = 0x1
COST_FIXED = 0x2
COST_VARIABLE = 0x4
COST_OVERDATALIMIT = 0x10000
COST_CONGESTED = 0x20000
COST_ROAMING = 0x40000
COST_APPROACHINGDATALIMIT = 0x80000


def nm_reading(value: object) -> Reading:
    """NetworkManager's `Metered` (a uint32) as a reading."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"Metered is {type(value).__name__}, not a number")
    known, words = NM_METERED.get(value, (None, f"an unknown Metered value {value}"))
    return Reading(known, NM_SOURCE, words)


def cost_reading(cost: int | None) -> Reading:
    """The Network List Manager's cost flags as a reading."""
    if not cost:
        return Reading(None, WINDOWS_SOURCE, "Windows does not know the cost" if cost == 0 else "no connection cost")
    if cost & COST_ROAMING:
        return Reading(True, WINDOWS_SOURCE, "roaming")
    if cost & COST_OVERDATALIMIT:
        return Reading(True, WINDOWS_SOURCE, "over the data limit")
    if cost & (COST_FIXED | COST_VARIABLE):
        return Reading(True, WINDOWS_SOURCE, "metered" if cost & COST_VARIABLE else "metered (a data plan)")
    if cost & COST_UNRESTRICTED:
        return Reading(False, WINDOWS_SOURCE, "not metered")
    return Reading(None, WINDOWS_SOURCE, f"unknown cost flags {cost:#x}")


class CostReader(Protocol):
    def cost(self) -> int | None:
        """The NLM_CONNECTION_COST flags of the machine's connectivity; raises OSError when COM fails."""
        ...


class WindowsCost:
    """`INetworkCostManager::GetCost` through ctypes' COM (Windows only; on a worker thread).

    CoCreateInstance(CLSID_NetworkListManager, IID_INetworkCostManager), then the vtable's
    fourth entry (after IUnknown's three) is `GetCost(DWORD *pCost, NLM_SOCKADDR *pDestIPAddr)`;
    a NULL destination asks for the machine-wide cost."""

    CLSID = "{DCB00C01-570F-4A9B-8D69-199FDBA5723B}"
    IID = "{DCB00008-570F-4A9B-8D69-199FDBA5723B}"

    def cost(self) -> int | None:
        import ctypes
        from ctypes import wintypes

        # Left untyped: ctypes has windll and WINFUNCTYPE on Windows only; mypy (run elsewhere) knows neither.
        windll: Any = getattr(ctypes, "windll")  # noqa: B009
        functype: Any = getattr(ctypes, "WINFUNCTYPE")  # noqa: B009
        ole32 = windll.ole32
        initialised = ole32.CoInitializeEx(None, 0x0) in (0, 1)  # COINIT_MULTITHREADED; S_OK or S_FALSE
        try:
            clsid, iid = (ctypes.create_string_buffer(16) for _ in range(2))
            for text, guid in ((self.CLSID, clsid), (self.IID, iid)):
                if ole32.CLSIDFromString(ctypes.c_wchar_p(text), guid) != 0:
                    raise OSError(f"CLSIDFromString {text} failed")
            ptr = ctypes.c_void_p()
            hr = ole32.CoCreateInstance(clsid, None, 0x17, iid, ctypes.byref(ptr))  # CLSCTX_ALL
            if hr != 0 or not ptr.value:
                raise OSError(f"CoCreateInstance(NetworkListManager) failed: {hr & 0xFFFFFFFF:#x}")
            vtable = ctypes.cast(ptr, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p))).contents
            release = functype(wintypes.ULONG, ctypes.c_void_p)(vtable[2])
            try:
                get_cost = functype(ctypes.c_long, ctypes.c_void_p, ctypes.POINTER(wintypes.DWORD), ctypes.c_void_p)(vtable[3])
                cost = wintypes.DWORD(0)
                hr = get_cost(ptr, ctypes.byref(cost), None)
                if hr != 0:
                    raise OSError(f"INetworkCostManager::GetCost failed: {hr & 0xFFFFFFFF:#x}")
                return int(cost.value)
            finally:
                release(ptr)
        finally:
            if initialised:
                ole32.CoUninitialize()


def windows_metered(reader: CostReader | None = None, *, interval_s: float = POLL_S, retry_s: float = 60.0,
                    clock: Clock | None = None) -> PolledSource:
    ops = reader or WindowsCost()
    worker = Worker(NAME)

    async def probe() -> Reading:
        return cost_reading(await worker.run(ops.cost))

    return PolledSource(NAME, probe, Reading(None, WINDOWS_SOURCE, "not read yet"), interval_s=interval_s,
                        retry_s=retry_s, clock=clock)


def macos_metered() -> Unreadable:
    return Unreadable(NAME, MACOS_SOURCE, "not read on macOS: its expensive/constrained path needs Network.framework")


def nm_metered(*, connect: Connect = system_bus, retry_s: float = 60.0, clock: Clock | None = None) -> PropertyWatch:
    """Linux: NetworkManager's `Metered`, followed over the system bus."""
    return PropertyWatch(NAME, NM, nm_reading, NM_SOURCE, connect=connect, retry_s=retry_s, clock=clock)


def metered_source(platform: str = sys.platform, *, reader: CostReader | None = None, connect: Connect | None = None,
                   retry_s: float = 60.0) -> ConditionSource:
    """The metered-network source of this platform."""
    if platform == "win32":
        return windows_metered(reader, retry_s=retry_s)
    if platform == "darwin":
        return macos_metered()
    return nm_metered(connect=connect or system_bus, retry_s=retry_s)
