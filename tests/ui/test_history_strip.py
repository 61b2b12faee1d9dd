"""A node's history strip: painted by Qt, checked by its coloured spans (not pixel for pixel)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

END = datetime(2026, 3, 1, 12, tzinfo=UTC)


def stamp(hours_before_end: float) -> str:
    return (END - timedelta(hours=hours_before_end)).isoformat()


def window(name: str, hours: float, spans: list[tuple[str, float, float]], restarts=(), uptime=None) -> dict:
    return {"name": name, "start": stamp(hours), "end": stamp(0), "uptime_percent": uptime,
            "restarts": len(restarts), "restart_times": [stamp(h) for h in restarts],
            "spans": [{"state": s, "start": stamp(a), "end": stamp(b)} for s, a, b in spans]}


def runs(image, y: int, x0: int, x1: int) -> list[tuple[str, int]]:
    """The colours along one pixel row, as (#rrggbb, length) runs."""
    out: list[tuple[str, int]] = []
    for x in range(x0, x1):
        colour = image.pixelColor(x, y).name()
        if out and out[-1][0] == colour:
            out[-1] = (colour, out[-1][1] + 1)
        else:
            out.append((colour, 1))
    return out


def test_the_strip_paints_each_state_as_a_span_in_proportion(qtbot):
    from cadre_desktop.ui.nodes.history_strip import EMPTY, RESTART, STATE_COLOURS, HistoryStrip

    strip = HistoryStrip()
    qtbot.addWidget(strip)
    day = window("24h", 24, [("up", 18, 6), ("down", 6, 5), ("gave-up", 5, 4), ("starting", 4, 3),
                             ("up", 3, 0)], restarts=[4], uptime=88.9)
    week = window("7d", 168, [("paused", 168, 84), ("up", 84, 0)], uptime=100.0)
    strip.set_history({"windows": [day, week]})
    strip.resize(600, strip.sizeHint().height())
    image = strip.grab().toImage()
    names = {QColor: state for state, QColor in STATE_COLOURS.items()} | {EMPTY: "none"}

    bar = strip.bar_rect(0)
    seen = runs(image, int(bar.center().y()), int(bar.left()), int(bar.right()))
    assert [names.get(c, c) for c, _ in seen] == ["none", "up", "down", "gave-up", "starting", "up"]
    hour = bar.width() / 24
    for (_, length), hours in zip(seen, (6, 12, 1, 1, 1, 3)):
        assert abs(length - hours * hour) <= 2, seen
    ticks = runs(image, int(bar.top()) + 1, int(bar.left()), int(bar.right()))
    assert RESTART in [c for c, _ in ticks]  # the restart marked at the bar's top

    week_bar = strip.bar_rect(1)
    seen = runs(image, int(week_bar.center().y()), int(week_bar.left()), int(week_bar.right()))
    assert [names.get(c, c) for c, _ in seen] == ["paused", "up"]
    assert abs(seen[0][1] - seen[1][1]) <= 2
    assert "88.9 % up, 1 restart" in strip.toolTip()


def test_the_details_pane_shows_a_nodes_history(shell, aio):
    shell.actions.add("Kitchen")
    view = aio.wait(lambda: next((v for v in shell.model.views() if v.ready), None))
    shell.window.select(view.id)
    strip = shell.window.details.history
    aio.wait(lambda: shell.model.refresh() or (strip.windows and strip.windows[0]["spans"][-1]["state"] == "up"))
    assert [w["name"] for w in strip.windows] == ["24h", "7d"]
    assert strip.isVisibleTo(shell.window.details)


def test_a_crash_second_in_a_day_of_up_and_one_in_the_windows_last_second_are_painted(qtbot):
    """A side-by-side run's strip lost a crash: its spans (whole seconds) began at the window's
    end, one past the bar, and a crash's second shares its pixel with the up around it."""
    from cadre_desktop.ui.nodes.history_strip import STATE_COLOURS, HistoryStrip

    strip = HistoryStrip()
    qtbot.addWidget(strip)
    second = 1 / 3600
    day = window("24h", 24, [("up", 24, 12), ("down", 12, 12 - second), ("up", 12 - second, 0),
                             ("down", 0, 0), ("starting", 0, 0)])
    strip.set_history({"windows": [day]})
    strip.resize(600, strip.sizeHint().height())
    image = strip.grab().toImage()
    bar = strip.bar_rect(0)
    seen = [c for c, _ in runs(image, int(bar.center().y()), int(bar.left()), int(bar.right()))]
    down = STATE_COLOURS["down"]
    assert seen.count(down) == 2 and seen[-1] == down, seen


def test_a_failover_here_is_a_mark_on_the_bar_and_a_line_of_the_tooltip(qtbot):
    from cadre_desktop.ui.nodes.history_strip import ARRIVAL_COLOURS, HistoryStrip

    strip = HistoryStrip()
    qtbot.addWidget(strip)
    day = window("24h", 24, [("up", 24, 0)], uptime=100.0)
    day["arrivals"] = [{"at": stamp(6), "kind": "failed_over", "words": "Study moved to nas: laptop lost its lease"}]
    strip.set_history({"windows": [day]})
    strip.resize(600, strip.sizeHint().height())
    image = strip.grab().toImage()
    bar = strip.bar_rect(0)
    marks = runs(image, int(bar.top()) + 1, int(bar.left()), int(bar.right()))
    assert ARRIVAL_COLOURS["failed_over"] in [c for c, _ in marks]
    assert "taken over here at 06:00 UTC: Study moved to nas" in strip.toolTip()
