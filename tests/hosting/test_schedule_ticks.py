"""Which tick comes next (``orchestra.hosting.schedules``, pure): due ticks, missed ones counted into one
record, time zones (a daily tick at 07:00 in Paris across a DST change), inputs, sessions, what a
schedule refuses, and which tick records are pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from orchestra.hosting.schedules import (
    Pruning,
    Schedule,
    TickRetention,
    due,
    plan,
    prune,
    prune_due,
    tick_key,
)

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


# -- pruning (``schedules.prune``): which records go, and the floor stored before they do ----------------

KEYS = [tick_key(T0 + timedelta(seconds=s)) for s in range(10)]


def test_the_newest_records_are_kept_and_the_floor_is_the_oldest_kept():
    decided = prune(KEYS, set(), None, T0, TickRetention(keep=3))
    assert decided == Pruning(KEYS[7], KEYS[:7])
    # Pruned again, with the floor stored: nothing more goes until more records come.
    assert prune(KEYS[7:], set(), KEYS[7], T0, TickRetention(keep=3)) == Pruning(None, [])


def test_an_open_claim_and_what_follows_it_stay():
    decided = prune(KEYS, {KEYS[4]}, None, T0, TickRetention(keep=3))
    assert decided == Pruning(KEYS[4], KEYS[:4])
    assert prune(KEYS, {KEYS[0]}, None, T0, TickRetention(keep=3)) == Pruning(None, [])


def test_records_left_below_the_floor_go_whatever_else_stays():
    # A prune that stopped half way left 1 and 3 below the floor 5; an open claim below the floor is a
    # leftover of a server that was behind: its record goes too.
    left = [KEYS[1], KEYS[3], *KEYS[5:]]
    decided = prune(left, {KEYS[3]}, KEYS[5], T0, TickRetention(keep=5))
    assert decided == Pruning(None, [KEYS[1], KEYS[3]])


def test_records_past_the_age_go_among_the_newest_but_the_newest_stays():
    now = T0 + timedelta(days=2, seconds=5)
    retention = TickRetention(keep=1000, max_age_days=2)
    # Ticks 0-4 are more than two days old; 5 is exactly two days old and stays.
    assert prune(KEYS, set(), None, now, retention) == Pruning(KEYS[5], KEYS[:5])
    later = T0 + timedelta(days=30)
    assert prune(KEYS, set(), None, later, retention) == Pruning(KEYS[9], KEYS[:9])
    assert prune(KEYS[-1:], set(), None, later, retention) == Pruning(None, [])


def test_the_floor_never_moves_back():
    # Another server's prune stored a higher floor: what is above it stays, below it goes.
    decided = prune(KEYS, set(), KEYS[8], T0, TickRetention(keep=5))
    assert decided == Pruning(None, KEYS[:8])


def test_one_record_a_period_prunes():
    every = every_second()
    cursor = T0 + timedelta(seconds=598)
    ticks = []
    for _ in range(4):  # 599, 600, 601, 602
        tick = plan(every, cursor, cursor + timedelta(seconds=1))
        assert tick is not None
        ticks.append(prune_due(cursor, tick, 600))
        cursor = tick.last
    assert ticks == [False, True, False, False]


def test_one_step_deletes_at_most_its_limit_with_the_floor_at_the_cap():
    retention = TickRetention(keep=2)
    first = prune(KEYS, set(), None, T0, retention, limit=3)
    assert first == Pruning(KEYS[3], KEYS[:3])
    # The next step, given what is left and that floor, goes on from there; the last one stops at keep.
    second = prune(KEYS[3:], set(), KEYS[3], T0, retention, limit=3)
    assert second == Pruning(KEYS[6], KEYS[3:6])
    assert prune(KEYS[6:], set(), KEYS[6], T0, retention, limit=3) == Pruning(KEYS[8], KEYS[6:8])
    # Leftovers below the floor count against the limit, and go first (the floor stays until they are gone).
    assert prune(KEYS, set(), KEYS[5], T0, retention, limit=3) == Pruning(None, KEYS[:3])
    assert prune(KEYS[3:], set(), KEYS[5], T0, retention, limit=3) == Pruning(KEYS[6], KEYS[3:6])
