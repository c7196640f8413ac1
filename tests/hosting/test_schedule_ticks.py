"""Which tick comes next (``orchestra.hosting.schedules``, pure): due ticks, missed ones counted into one
record, time zones (a daily tick at 07:00 in Paris across a DST change), inputs, sessions, and what a
schedule refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from orchestra.hosting.schedules import Schedule, due, plan, tick_key

T0 = datetime(2026, 3, 27, 12, 0, 0, tzinfo=UTC)


def every_second(**fields) -> Schedule:
    return Schedule(id="s", agent="a", cron="* * * * * *", **fields)


def test_nothing_is_due_before_the_next_tick():
    assert plan(every_second(), T0, T0 + timedelta(milliseconds=999)) is None


def test_a_due_tick_is_one_record():
    tick = plan(every_second(), T0, T0 + timedelta(seconds=1, milliseconds=300))
    assert tick is not None
    assert (tick.first, tick.last, tick.count, tick.missed) == (T0 + timedelta(seconds=1),) * 2 + (1, False)
    assert tick.key == "20260327T120001Z"


def test_ticks_later_than_missed_after_s_are_one_missed_record():
    schedule = every_second(missed_after_s=5)
    now = T0 + timedelta(seconds=60)
    tick = plan(schedule, T0, now)
    assert tick is not None
    assert tick.missed
    # Ticks 1..54 are more than 5 s late; 55 and after are not (they run one by one).
    assert (tick.first, tick.last, tick.count) == (T0 + timedelta(seconds=1), T0 + timedelta(seconds=54), 54)
    following = plan(schedule, tick.last, now)
    assert following is not None
    assert (following.first, following.missed) == (T0 + timedelta(seconds=55), False)


def test_a_daily_tick_follows_its_zone_across_daylight_saving():
    daily = Schedule(id="d", agent="a", cron="0 7 * * *", timezone="Europe/Paris")
    # Paris moves to summer time on 2026-03-29: 07:00 is 06:00 UTC before, 05:00 UTC after.
    first = due(daily, T0)
    second = due(daily, first)
    third = due(daily, second)
    assert [t.isoformat() for t in (first, second, third)] == [
        "2026-03-28T06:00:00+00:00",
        "2026-03-29T05:00:00+00:00",
        "2026-03-30T05:00:00+00:00",
    ]
    assert daily.run_input(first) == ""
    report = daily.model_copy(update={"input": "Report for {date} ({tick})"})
    assert report.run_input(second) == "Report for 2026-03-29 (2026-03-29T07:00:00+02:00)"


def test_sessions_per_run_or_continued():
    tick = T0 + timedelta(seconds=1)
    assert every_second().run_session(tick) == f"s-{tick_key(tick)}"
    assert every_second(session="continue").run_session(tick) == "s"
    assert every_second(session="continue", session_id="inbox").run_session(tick) == "inbox"
    assert every_second(session="none").run_session(tick) is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"cron": "every morning"}, "not a valid cron"),
        ({"timezone": "Mars/Olympus"}, "not a known IANA time zone"),
        ({"session_id": "x"}, "session_id goes with session: continue"),
        ({"missed": "twice"}, "skip"),
    ],
)
def test_a_bad_schedule_is_refused_by_name(fields, words):
    with pytest.raises(ValidationError) as raised:
        Schedule(**{"id": "s", "agent": "a", "cron": "0 7 * * *", **fields})
    assert words in str(raised.value)
