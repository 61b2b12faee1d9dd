"""`cadre-desktop node history ID`: a node's last 24 hours and 7 days as a text strip.

One character a slice of the window; a slice shows the worst state seen in it (a
second of *down* in half an hour of *up* is shown), as status pages do. A line of
marks under each strip says where the node started again.
"""

from __future__ import annotations

from typing import Any

from cadre_desktop.cli.terminal import EXIT_OK, client, out, print_json
from cadre_desktop.paths import Paths
from cadre_desktop.times import parse_time

WIDTH = 48
#: Worst first: the state a slice shows when several meet in it.
SEVERITY = ("gave-up", "down", "starting", "paused", "up", "none")
MARKS = {"up": "█", "starting": "▒", "down": "░", "paused": "·", "gave-up": "X", "none": " "}
LEGEND = "█ up  ▒ starting  ░ down  X given up  · paused or sleeping  (blank) no host running"
LABELS = {"24h": "24 h", "7d": "7 d"}


def _t(stamp: str) -> float:
    when = parse_time(stamp, zone="utc")
    return 0.0 if when is None else when.timestamp()


def slices(window: dict[str, Any], width: int = WIDTH) -> list[str]:
    """The state each of `width` slices of the window shows ("none" where nothing is known)."""
    start, end = _t(window["start"]), _t(window["end"])
    step = (end - start) / width
    shown = ["none"] * width
    for span in window["spans"]:
        a, b = _t(span["start"]), _t(span["end"])
        # The API's times are whole seconds: a span in the window's last second starts at its end,
        # and is the last slice's, not one past it.
        first = int(min(width - 1, max(0.0, (a - start) // step)))
        last = int(min(width - 1, max(0.0, (b - start - 1e-9) // step)))
        for i in range(first, max(first, last) + 1):
            if SEVERITY.index(span["state"]) < SEVERITY.index(shown[i]):
                shown[i] = span["state"]
    return shown


def restart_marks(window: dict[str, Any], width: int = WIDTH) -> str:
    start, end = _t(window["start"]), _t(window["end"])
    row = [" "] * width
    for stamp in window.get("restart_times", []):
        row[min(width - 1, max(0, int((_t(stamp) - start) / (end - start) * width)))] = "^"
    return "".join(row)


def strip_lines(doc: dict[str, Any], width: int = WIDTH) -> list[str]:
    lines = []
    for window in doc["windows"]:
        label = LABELS.get(window["name"], window["name"])
        uptime = window["uptime_percent"]
        up = f"{uptime:.2f} % up" if uptime is not None else "no uptime yet"
        restarts = window["restarts"]
        bar = "".join(MARKS.get(s, "?") for s in slices(window, width))
        lines.append(f"{label:<5}|{bar}| {up}, {restarts} restart{'s' if restarts != 1 else ''}")
        marks = restart_marks(window, width)
        if marks.strip():
            lines.append(f"{'':<5} {marks}".rstrip())
    return lines + [LEGEND]


def cmd_history(args: Any, paths: Paths) -> int:
    doc = client(paths).node_history(args.id)
    if args.json:
        print_json(doc)
        return EXIT_OK
    for line in strip_lines(doc):
        out(line)
    return EXIT_OK
