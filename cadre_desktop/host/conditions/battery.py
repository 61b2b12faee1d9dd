"""On battery: is this computer running on its battery now (`pause_on_battery`)?

Linux: UPower's `OnBattery` on `org.freedesktop.UPower` at `/org/freedesktop/UPower`, over the
system D-Bus, following its `PropertiesChanged` (`dbusprop.PropertyWatch`); no UPower on the bus
reads unknown (never a stop) and is tried again. Windows and macOS: psutil's
`sensors_battery().power_plugged`, asked every `POLL_S` on a worker thread (`PsutilPower` is the
seam tests replace); a computer with no battery reads False ("no battery"), a battery whose plug
state the OS does not say reads unknown.
"""

from __future__ import annotations

import sys
from typing import Protocol

from cadre_desktop.host.conditions.dbusprop import Connect, Property, PropertyWatch, system_bus
from cadre_desktop.host.conditions.polled import PolledSource, Worker
from cadre_desktop.host.conditions.source import ConditionSource, Reading
from cadre_desktop.host.core.clock import Clock

NAME = "on_battery"
UPOWER = Property("org.freedesktop.UPower", "/org/freedesktop/UPower", "org.freedesktop.UPower", "OnBattery")
UPOWER_SOURCE = "UPower over the system D-Bus"
PSUTIL_SOURCE = "the OS's power state (psutil)"
#: How often Windows and macOS are asked (psutil has no change signal).
POLL_S = 30.0


def upower_reading(value: object) -> Reading:
    """UPower's `OnBattery` (a boolean) as a reading."""
    if not isinstance(value, bool):
        raise TypeError(f"OnBattery is {type(value).__name__}, not a boolean")
    return Reading(value, UPOWER_SOURCE, "on battery" if value else "on mains power")


class PowerState(Protocol):
    """psutil's battery: None with no battery; else its `power_plugged` (None: the OS does not say)
    and `percent`."""

    power_plugged: bool | None
    percent: float


class PowerReader(Protocol):
    def battery(self) -> PowerState | None:
        """The battery, None with none; may block (on a worker thread)."""
        ...


class PsutilPower:
    """The OS's power state through psutil (a call that reads the OS, on a worker thread)."""

    def battery(self) -> PowerState | None:
        import psutil

        battery: PowerState | None = psutil.sensors_battery()
        return battery


def psutil_reading(battery: PowerState | None) -> Reading:
    """psutil's answer as a reading: plugged in is False (not on battery), no battery is False."""
    if battery is None:
        return Reading(False, PSUTIL_SOURCE, "no battery")
    percent = f" ({battery.percent:.0f} %)" if isinstance(battery.percent, (int, float)) else ""
    if battery.power_plugged is None:
        return Reading(None, PSUTIL_SOURCE, f"the OS does not say whether it is plugged in{percent}")
    if battery.power_plugged:
        return Reading(False, PSUTIL_SOURCE, f"on mains power{percent}")
    return Reading(True, PSUTIL_SOURCE, f"on battery{percent}")


def polled_battery(power: PowerReader | None = None, *, interval_s: float = POLL_S, retry_s: float = 60.0,
                   clock: Clock | None = None) -> PolledSource:
    """Windows and macOS: psutil asked every `interval_s`."""
    ops: PowerReader = power or PsutilPower()
    worker = Worker(NAME)

    async def probe() -> Reading:
        return psutil_reading(await worker.run(ops.battery))

    return PolledSource(NAME, probe, Reading(None, PSUTIL_SOURCE, "not read yet"), interval_s=interval_s,
                        retry_s=retry_s, clock=clock)


def upower_battery(*, connect: Connect = system_bus, retry_s: float = 60.0, clock: Clock | None = None) -> PropertyWatch:
    """Linux: UPower's `OnBattery`, followed over the system bus."""
    return PropertyWatch(NAME, UPOWER, upower_reading, UPOWER_SOURCE, connect=connect, retry_s=retry_s, clock=clock)


def battery_source(platform: str = sys.platform, *, power: PowerReader | None = None,
                   connect: Connect | None = None, retry_s: float = 60.0, clock: Clock | None = None) -> ConditionSource:
    """The on-battery source of this platform: UPower on Linux (and the BSDs, where it runs too),
    psutil on Windows and macOS."""
    if platform in ("win32", "darwin"):
        return polled_battery(power, retry_s=retry_s, clock=clock)
    return upower_battery(connect=connect or system_bus, retry_s=retry_s, clock=clock)
