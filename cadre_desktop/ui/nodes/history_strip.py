"""A node's history as a strip: the last 24 hours and 7 days, painted with Qt's own painter.

One row a window: its name, a bar whose spans are coloured by state (left is the
window's start, right is now), a tick at the top of the bar at each restart, and the
uptime percentage. It draws the host's `node_history` document as it is; no
plotting library for a strip.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

from cadre_desktop.times import parse_time

#: A state's colour; "none" (no host was running) is left in the bar's own grey.
STATE_COLOURS = {
    "up": "#2e9e44",
    "starting": "#d08a00",
    "down": "#e8710a",
    "gave-up": "#d93025",
    "paused": "#7b8ea8",
}
#: The order spans are painted in: the worst last, so it is what a pixel they share shows.
PAINT_ORDER = ("none", "up", "paused", "starting", "down", "gave-up")
#: A mark at the top of the bar where the node came here from another computer.
ARRIVAL_COLOURS = {"moved": "#1a73e8", "failed_over": "#8430ce"}
ARRIVAL_WORDS = {"moved": "moved here", "failed_over": "taken over here"}
EMPTY = "#d9dce1"
RESTART = "#202124"
LABELS = {"24h": "24 h", "7d": "7 d"}
ROW_H, BAR_H, GAP = 26, 14, 4


def _paint_rank(span: dict[str, Any]) -> int:
    state = span.get("state")
    return PAINT_ORDER.index(state) if state in PAINT_ORDER else 0


def _t(stamp: str) -> float:
    when = parse_time(stamp, zone="utc")
    return 0.0 if when is None else when.timestamp()


def uptime_words(window: dict[str, Any]) -> str:
    uptime = window.get("uptime_percent")
    return "—" if uptime is None else f"{uptime:.1f} %"


class HistoryStrip(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.windows: list[dict[str, Any]] = []
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(200)

    def set_history(self, doc: dict[str, Any] | None) -> None:
        windows = list((doc or {}).get("windows") or [])
        if windows != self.windows:
            self.windows = windows
            arrivals = {(a.get("at"), a.get("kind"), a.get("words")) for w in windows for a in w.get("arrivals", [])}
            self.setToolTip("\n".join(
                [f"{LABELS.get(w['name'], w['name'])}: {uptime_words(w)} up, {w['restarts']} restart"
                 f"{'s' if w['restarts'] != 1 else ''}" for w in windows]
                + [f"{ARRIVAL_WORDS.get(str(k), 'moved here')} at {str(at)[11:16]} UTC: {str(words)[:200]}"
                   for at, k, words in sorted(arrivals, key=str)]))
            self.updateGeometry()
            self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(360, max(1, len(self.windows)) * ROW_H)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(200, max(1, len(self.windows)) * ROW_H)

    def bar_rect(self, row: int) -> QRectF:
        """Where row `row`'s bar is painted (tests sample it)."""
        metrics = self.fontMetrics()
        left = metrics.horizontalAdvance("24 h") + 2 * GAP
        right = metrics.horizontalAdvance("100.0 %") + 2 * GAP
        top = row * ROW_H + (ROW_H - BAR_H) / 2
        return QRectF(left, top, max(10, self.width() - left - right), BAR_H)

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        text = self.palette().color(self.foregroundRole())
        for row, window in enumerate(self.windows):
            bar = self.bar_rect(row)
            start, end = _t(window["start"]), _t(window["end"])
            scale = bar.width() / max(1.0, end - start)
            painter.fillRect(bar, QColor(EMPTY))
            # A crash's second in a day's bar shares its pixel with the up around it, and is what it
            # shows; a span at the window's end (whole seconds) is its last pixel, not one past it.
            for span in sorted(window["spans"], key=_paint_rank):
                colour = STATE_COLOURS.get(span["state"])
                if colour is None:
                    continue
                x0 = min(bar.left() + (_t(span["start"]) - start) * scale, bar.right() - 1)
                x1 = bar.left() + (_t(span["end"]) - start) * scale
                painter.fillRect(QRectF(x0, bar.top(), max(1.0, x1 - x0), bar.height()), QColor(colour))
            for arrival in window.get("arrivals", []):
                x = bar.left() + (_t(arrival.get("at", "")) - start) * scale
                mark = QColor(ARRIVAL_COLOURS.get(arrival.get("kind"), RESTART))
                painter.fillRect(QRectF(min(x, bar.right() - 3), bar.top(), 3, bar.height() / 2), mark)
            for stamp in window.get("restart_times", []):
                x = bar.left() + (_t(stamp) - start) * scale
                painter.fillRect(QRectF(min(x, bar.right() - 2), bar.top(), 2, bar.height() / 4), QColor(RESTART))
            painter.setPen(text)
            label_rect = QRectF(0, row * ROW_H, bar.left() - GAP, ROW_H)
            painter.drawText(label_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                             LABELS.get(window["name"], window["name"]))
            value_rect = QRectF(bar.right() + GAP, row * ROW_H, self.width() - bar.right() - GAP, ROW_H)
            painter.drawText(value_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                             uptime_words(window))
        painter.end()
