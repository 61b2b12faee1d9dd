"""The local driver's own configuration: what it takes from the settings beyond the core's.

`host/drivers.py` builds it from the settings (`driver_config`), at the start and on
every live change; the core's seam knows only its base, `core.driver.DriverConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cadre_desktop.host.core.driver import DriverConfig


@dataclass(frozen=True)
class LocalConfig(DriverConfig):
    """Local processes: the core's fields, and whether one node program is kept loaded ahead."""

    #: Keep one node program loaded ahead for the next start (see `standby`).
    warm_standby: bool = False
