"""How busy a computer is, as the fleet link tells it: `GET /fleet/hello` and `GET /api/fleet` carry
`{"cpu_percent", "memory_percent"}` (the window's header of each computer shows them).

Small and cheap on purpose (it answers every peer's reachability check): the one-minute load average
over the cores (POSIX; on Windows, psutil's CPU share since the last call) and the memory in use,
each a number from 0 to `MAX` or null. What another computer says of itself is hostile until checked:
a number of the bounds, else nothing.
"""

from __future__ import annotations

import logging
import math
import os
import sys

from cadre_desktop.jsontypes import JSONObject

log = logging.getLogger(__name__)

#: A load average may exceed the cores (a queue): shown as said, bounded.
MAX = 1000.0
KEYS = ("cpu_percent", "memory_percent")


def here() -> JSONObject:
    """This computer's load now (null where this platform cannot say)."""
    return {"cpu_percent": _cpu(), "memory_percent": _memory()}


def _cpu() -> float | None:
    try:
        if sys.platform == "win32":
            import psutil

            return _bounded(psutil.cpu_percent(None))
        return _bounded(os.getloadavg()[0] / (os.cpu_count() or 1) * 100)
    except (OSError, AttributeError, ImportError) as exc:
        log.debug("fleet: no load average here: %s", exc)
        return None


def _memory() -> float | None:
    try:
        import psutil

        return _bounded(psutil.virtual_memory().percent)
    except (OSError, ImportError, RuntimeError) as exc:
        log.debug("fleet: no memory figure here: %s", exc)
        return None


def _bounded(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(min(max(float(value), 0.0), MAX), 1)


def checked(doc: object) -> JSONObject | None:
    """Another computer's `load` as it said it: each figure a number within 0..MAX, else null; None when
    it said none (an older version, or nothing fit)."""
    if not isinstance(doc, dict):
        return None
    figures = {key: _percent(doc.get(key)) for key in KEYS}
    return dict(figures) if any(v is not None for v in figures.values()) else None


def _percent(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= MAX:
        return None
    return round(float(value), 1)
