"""The run conditions' judge on the fake clock with fake sources: each condition alone and together,
off in the settings, unknown, flapping and the debounce, the schedule's holds and ends; and the
schedule itself across midnight, a daylight-saving change and a changed time zone; bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cadre_desktop.errors import SettingsError
from cadre_desktop.host.conditions.judge import DEBOUNCE_S, Judge
from cadre_desktop.host.conditions.schedule import Schedule
from cadre_desktop.host.core.supervision.host_holds import ConditionsVerdict
from cadre_desktop.settings import Settings, parse_settings
from tests.support.clock import FakeClock
from tests.support.fake_conditions import FakeSource

BERLIN = ZoneInfo("Europe/Berlin")
NIGHTS = [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00"}]


class Rig:
    def __init__(self, **settings) -> None:
        self.clock = FakeClock(datetime(2026, 1, 5, 12, 0, tzinfo=UTC))  # a Monday, 13:00 in Berlin
        self.battery, self.in_use, self.metered = FakeSource("on_battery"), FakeSource("in_use"), FakeSource("metered")
        self.changes = 0
        self.judge = Judge(Settings(**settings), self.clock, [self.battery, self.in_use, self.metered],
                           on_change=self.changed, zone=lambda: BERLIN)

    def changed(self) -> None:
        self.changes += 1


@pytest.fixture
async def rig():
    r = Rig()
    await r.judge.start()
    yield r
    await r.judge.stop()


async def make(**settings) -> Rig:
    r = Rig(**settings)
    await r.judge.start()
    return r


async def test_unknown_everywhere_lets_nodes_run(rig):
    assert rig.judge.verdict() is None and rig.battery.started
    assert [row["sees"] for row in rig.judge.report()["conditions"][:3]] == ["unknown"] * 3


@pytest.mark.parametrize(("source", "words", "setting"), [
    ("battery", "on battery", {}),
    ("metered", "on a metered network", {}),
    ("in_use", "the computer is in use", {"pause_when_in_use": True}),
])
async def test_each_condition_holds_and_releases(source, words, setting):
    r = await make(**setting)
    getattr(r, source).set(True)
    assert r.judge.verdict() == ConditionsVerdict(words)
    await r.clock.run_for(DEBOUNCE_S)
    getattr(r, source).set(False)
    assert r.judge.verdict() is None and r.changes == 2
    await r.judge.stop()


@pytest.mark.parametrize(("source", "setting"), [("battery", "pause_on_battery"), ("metered", "pause_on_metered_network"),
                                                 ("in_use", "pause_when_in_use")])
async def test_a_condition_turned_off_never_holds(source, setting):
    r = await make(**{setting: False})
    getattr(r, source).set(True)
    assert r.judge.verdict() is None and r.changes == 0
    row = next(row for row in r.judge.report()["conditions"] if row["setting"] == setting)
    assert row["does"].startswith("nothing") and row["value"] is True
    await r.judge.stop()


async def test_conditions_together_say_every_reason_and_a_new_reason_is_taken_at_once(rig):
    rig.battery.set(True)
    rig.metered.set(True)  # within the debounce: no start or stop rides on it, so taken now
    assert rig.judge.verdict() == ConditionsVerdict("on battery, on a metered network")
    rig.battery.set(None)  # unknown never holds
    assert rig.judge.verdict() == ConditionsVerdict("on a metered network")


async def test_flapping_is_debounced_to_one_change_a_minute(rig):
    rig.battery.set(True)
    assert rig.judge.verdict() is not None and rig.changes == 1
    for _ in range(5):  # mains, battery, mains ... every 5 s
        await rig.clock.run_for(5)
        rig.battery.set(False)
        await rig.clock.run_for(5)
        rig.battery.set(True)
    assert rig.changes == 1 and rig.judge.verdict() is not None  # never released while it flapped
    await rig.clock.run_for(5)
    rig.battery.set(False)
    assert rig.judge.verdict() is not None and rig.judge.pending_at is not None
    await rig.clock.run_for(DEBOUNCE_S)
    assert rig.judge.verdict() is None and rig.changes == 2  # released once the minute since the hold passed


async def test_a_change_back_inside_the_debounce_cancels_the_pending_one(rig):
    rig.battery.set(True)
    await rig.clock.run_for(10)
    rig.battery.set(False)
    assert rig.judge.pending_at is not None
    await rig.clock.run_for(10)
    rig.battery.set(True)
    assert rig.judge.pending_at is None
    await rig.clock.run_for(DEBOUNCE_S)
    assert rig.judge.verdict() is not None and rig.changes == 1


async def test_a_persons_change_of_the_schedule_is_taken_at_once_not_debounced():
    """Issue 39 (8): a schedule removed in *When to run* waited out the 60 s debounce before the
    node started; the debounce is for flapping sources, not for a person."""
    r = await make(run_schedule=NIGHTS)
    assert r.judge.verdict() is not None and r.changes == 1
    await r.clock.run_for(5)
    r.judge.use_settings(Settings())  # the schedule removed
    assert r.judge.verdict() is None and r.judge.pending_at is None and r.changes == 2
    await r.clock.run_for(5)
    r.judge.use_settings(Settings(run_schedule=NIGHTS))  # and put back: held again at once
    assert r.judge.verdict() is not None and r.changes == 3
    await r.clock.run_for(5)
    r.battery.set(True)  # a source right after: a new reason for a hold, taken at once
    await r.clock.run_for(5)
    r.judge.use_settings(Settings())
    r.battery.set(False)  # a source's flip right after a person's: still debounced
    assert r.judge.verdict() is not None and r.judge.pending_at is not None
    await r.judge.stop()


async def test_outside_the_schedule_holds_until_its_next_window_and_releases_then():
    r = await make(run_schedule=NIGHTS)
    verdict = r.judge.verdict()
    assert verdict == ConditionsVerdict("outside the schedule until Mon 22:00",
                                        datetime(2026, 1, 5, 21, 0, tzinfo=UTC))
    await r.clock.run_for(9 * 3600 + 1)  # 22:00:01 in Berlin: the timer looked again by itself
    assert r.judge.verdict() is None and r.changes == 2
    row = r.judge.report()["conditions"][3]
    assert row["sees"] == "inside the schedule until Tue 07:00" and "Europe/Berlin" in row["source"]
    await r.judge.stop()


async def test_schedule_and_battery_together_have_no_end(rig):
    rig.judge.use_settings(Settings(run_schedule=NIGHTS))
    rig.battery.set(True)
    assert rig.judge.verdict() == ConditionsVerdict("on battery, outside the schedule until Mon 22:00")


# -- the schedule alone -----------------------------------------------------------------------

def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN)


def test_a_window_across_midnight_runs_into_the_next_day():
    s = Schedule([{"days": ["fri"], "from": "22:00", "to": "07:00"}], zone=lambda: BERLIN)
    sat_early = s.at(at("2026-01-10T06:59"))  # Saturday
    assert sat_early.inside and sat_early.next_change == at("2026-01-10T07:00")
    sat_late = s.at(at("2026-01-10T07:00"))
    assert not sat_late.inside and sat_late.next_change == at("2026-01-16T22:00")
    assert not s.at(at("2026-01-09T21:59")).inside and s.at(at("2026-01-09T23:30")).inside


def test_a_night_across_the_spring_daylight_saving_change_is_an_hour_shorter():
    # Europe/Berlin springs forward on Sunday 29 March 2026, 02:00 -> 03:00.
    s = Schedule([{"days": ["sat"], "from": "22:00", "to": "07:00"}], zone=lambda: BERLIN)
    moment = s.at(at("2026-03-28T23:00"))
    assert moment.inside and moment.next_change == at("2026-03-29T07:00")
    assert moment.next_change - at("2026-03-28T22:00") == timedelta(hours=8)  # 9 wall hours, 8 real ones
    assert s.words(moment.next_change) == "Sun 07:00"


def test_a_window_opening_in_the_skipped_hour_opens_at_the_change():
    s = Schedule([{"days": ["sun"], "from": "02:30", "to": "05:00"}], zone=lambda: BERLIN)
    before = s.at(datetime(2026, 3, 29, 0, 59, tzinfo=UTC))  # 01:59 CET
    assert not before.inside and before.next_change is not None
    assert before.next_change <= datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert s.at(datetime(2026, 3, 29, 1, 45, tzinfo=UTC)).inside  # 03:45 CEST


def test_a_changed_time_zone_is_followed_at_the_next_look():
    zone = {"now": BERLIN}
    s = Schedule([{"days": ["mon"], "from": "09:00", "to": "17:00"}], zone=lambda: zone["now"])
    noon_utc = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    assert s.at(noon_utc).inside
    zone["now"] = ZoneInfo("America/New_York")  # 07:00 there
    moment = s.at(noon_utc)
    assert not moment.inside and moment.next_change is not None and s.words(moment.next_change) == "Mon 09:00"


def test_a_whole_day_and_the_end_of_the_week():
    s = Schedule([{"days": ["sun"], "from": "00:00", "to": "24:00"}], zone=lambda: BERLIN)
    assert s.at(at("2026-01-11T23:59")).inside
    assert not s.at(at("2026-01-12T00:00")).inside


@pytest.mark.parametrize(("schedule", "words"), [
    ([{"days": ["mon"], "from": "07:00", "to": "07:00"}], "empty"),
    ([{"days": ["mon", "funday"], "from": "07:00", "to": "09:00"}], "'funday' is not a day"),
    ([{"days": ["mon"], "from": "7:00", "to": "09:00"}], "times like 07:00"),
    ([{"days": ["mon"], "from": "24:00", "to": "09:00"}], "times like 07:00"),
    ([{"days": ["mon"], "from": "07:60", "to": "09:00"}], "times like 07:00"),
    ([{"days": [], "from": "07:00", "to": "09:00"}], "non-empty list"),
    ([{"days": ["mon"], "from": "07:00"}], "object of days, from and to"),
    ([], "1 to 28 windows"),
    ("nights", "1 to 28 windows"),
])
def test_bad_schedules_are_one_clear_error_naming_the_key(schedule, words):
    with pytest.raises(SettingsError, match="run_schedule") as caught:
        parse_settings({"run_schedule": schedule}, "settings.json")
    assert words in str(caught.value)


def test_a_good_schedule_is_kept_in_its_plain_form():
    s = parse_settings({"run_schedule": [{"days": ["Friday", "mon", "mon"], "from": "22:00", "to": "07:00"}],
                        "pause_when_in_use": True, "in_use_idle_minutes": 5}, "settings.json")
    assert s.run_schedule == [{"days": ["mon", "fri"], "from": "22:00", "to": "07:00"}]
    assert s.pause_when_in_use and s.in_use_idle_minutes == 5 and s.pause_on_battery and s.pause_on_metered_network


class BrokenSource(FakeSource):
    async def start(self, on_change) -> None:
        raise RuntimeError("no D-Bus here")

    def reading(self):
        raise RuntimeError("still none")


async def test_a_source_that_breaks_reads_unknown_and_never_stops_a_node():
    clock = FakeClock(datetime(2026, 1, 5, 12, 0, tzinfo=UTC))
    judge = Judge(Settings(), clock, [BrokenSource("on_battery")], zone=lambda: BERLIN)
    await judge.start()
    assert judge.verdict() is None
    row = judge.report()["conditions"][0]
    assert row["sees"] == "unknown" and "still none" in row["detail"]
    await judge.stop()


async def test_a_condition_turned_on_in_the_settings_gets_its_source_made_and_started():
    """Regression: the sources were made once at start, so a condition turned on in Preferences
    (pause_when_in_use is off by default) was never read until the host started again."""
    from cadre_desktop.host.conditions.judge import Judge
    from cadre_desktop.settings import Settings
    from tests.support.clock import FakeClock
    from tests.support.fake_conditions import FakeSource

    made: list[list[FakeSource]] = []

    def make_sources(settings: Settings) -> list[FakeSource]:
        sources = [FakeSource("on_battery", False)]
        if settings.pause_when_in_use:
            sources.append(FakeSource("in_use", True))
        made.append(sources)
        return sources

    clock = FakeClock()
    first = make_sources(Settings())
    judge = Judge(Settings(), clock, first, make_sources=make_sources)
    await judge.start()
    assert judge.verdict() is None  # nothing holds: run
    judge.use_settings(Settings(pause_when_in_use=True))
    await clock.run_for(0)
    assert len(made) == 2 and all(s.stopped for s in first) and all(s.started for s in made[1])
    assert set(judge.sources) == {"on_battery", "in_use"}
    judge.use_settings(Settings(pause_when_in_use=True, pause_on_battery=True))  # nothing the sources read changed
    await clock.run_for(0)
    assert len(made) == 2
    await judge.stop()
