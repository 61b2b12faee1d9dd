"""Summaries, tables and result files shared by the benchmarks.

Every benchmark reports min / p50 / p90 / max (or p99) of what it measured,
prints one table and writes the same numbers to `bench/results/<name>.json`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def quantile(ordered: list[float], q: float) -> float:
    """Nearest-rank quantile of an already sorted list (no interpolation)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "min": None, "p50": None, "p90": None, "p99": None, "max": None}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "min": ordered[0],
        "p50": statistics.median(ordered),
        "p90": quantile(ordered, 0.9),
        "p99": quantile(ordered, 0.99),
        "max": ordered[-1],
    }


def machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.system()} {platform.release()} {platform.machine()}, {cpu or 'unknown CPU'}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}")


def fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(headers: list[str], rows: list[list], digits: int = 2) -> str:
    """A plain table for the terminal; the README uses the Markdown form of the same rows."""
    cells = [[fmt(c, digits) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for row in cells:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def markdown(headers: list[str], rows: list[list], digits: int = 2) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        out.append("| " + " | ".join(fmt(c, digits) for c in row) + " |")
    return "\n".join(out)


def load() -> list[float] | None:
    """The machine's load average (1, 5, 15 min), or None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def write_result(name: str, result: dict) -> Path:
    """Write `bench/results/<name>.json`, always with the machine, the date and the load at the
    time (`loadavg_at_write`; a benchmark adds `loadavg_at_start` itself where it has one)."""
    result.setdefault("machine", machine())
    result.setdefault("loadavg_at_write", load())
    result.setdefault("date", time.strftime("%Y-%m-%d %H:%M:%S %z"))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)
    return path
