"""Schedules: nominal occurrences, the daylight-saving policy, anchored intervals, fingerprints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runnerq_django.scheduler.declarations import make_job
from runnerq_django.scheduler.schedules import CronSchedule, IntervalSchedule, ScheduleError, format_instant

UTC = UTC


def _iso(values):
    return [format_instant(v) for v in values]


def test_dst_spring_forward_a_missing_wall_time_fires_once_shifted_by_the_gap():
    daily = CronSchedule("30 2 * * *", "Europe/Paris")
    # 02:30 does not exist on 2024-03-31 in Paris: it fires at 03:30 CEST (01:30Z), once.
    assert format_instant(daily.next_after(datetime(2024, 3, 30, 12, tzinfo=UTC))) == "2024-03-31T01:30:00Z"
    half_hourly = CronSchedule("*/30 * * * *", "Europe/Paris")
    got = half_hourly.between(
        datetime(2024, 3, 31, 0, 0, tzinfo=UTC), datetime(2024, 3, 31, 2, 0, tzinfo=UTC)
    )
    assert _iso(got) == [
        "2024-03-31T00:30:00Z",
        "2024-03-31T01:00:00Z",
        "2024-03-31T01:30:00Z",
        "2024-03-31T02:00:00Z",
    ]


def test_dst_fall_back_an_ambiguous_wall_time_fires_once_at_its_first_instant():
    daily = CronSchedule("30 2 * * *", "Europe/Paris")
    # 02:30 happens twice on 2024-10-27 (CEST then CET): it fires at the first, 00:30Z, only.
    assert _iso(
        daily.between(datetime(2024, 10, 26, 12, tzinfo=UTC), datetime(2024, 10, 28, tzinfo=UTC))
    ) == ["2024-10-27T00:30:00Z"]
    hourly = CronSchedule("0 * * * *", "Europe/Paris")
    got = hourly.between(
        datetime(2024, 10, 26, 23, 30, tzinfo=UTC), datetime(2024, 10, 27, 2, 30, tzinfo=UTC)
    )
    assert _iso(got) == ["2024-10-27T00:00:00Z", "2024-10-27T02:00:00Z"]  # the repeated 02:00 is skipped
    assert (
        format_instant(hourly.latest_at_or_before(datetime(2024, 10, 27, 1, 45, tzinfo=UTC)))
        == "2024-10-27T00:00:00Z"
    )


def test_cron_in_a_zone_and_in_utc_agree_away_from_transitions():
    utc = CronSchedule("0 4 * * *")
    assert format_instant(utc.next_after(datetime(2030, 1, 1, 4, tzinfo=UTC))) == "2030-01-02T04:00:00Z"
    ny = CronSchedule("0 4 * * *", "America/New_York")
    assert format_instant(ny.next_after(datetime(2030, 1, 1, tzinfo=UTC))) == "2030-01-01T09:00:00Z"


def test_intervals_are_a_lattice_fixed_in_absolute_time():
    every = IntervalSchedule(timedelta(minutes=5), "2030-01-01T00:02:00Z")
    moment = datetime(2030, 3, 1, 10, 0, 30, 123456, tzinfo=UTC)
    assert format_instant(every.next_after(moment)) == "2030-03-01T10:02:00Z"
    assert format_instant(every.latest_at_or_before(moment)) == "2030-03-01T09:57:00Z"
    # The same instants whatever the starting point of the question (no re-anchoring at "now").
    assert every.between(moment, moment + timedelta(minutes=11)) == every.between(
        moment - timedelta(seconds=20), moment + timedelta(minutes=11)
    )
    with pytest.raises(ScheduleError):
        IntervalSchedule(timedelta(milliseconds=1500))
    with pytest.raises(ScheduleError):
        IntervalSchedule(timedelta(minutes=1), "2030-01-01T00:00:00")  # no offset: ambiguous anchor


def test_fingerprints_cover_the_schedule_and_the_definition_separately():
    base = make_job("j", cron="0 4 * * *", activity="x.Y")
    assert (
        base.schedule_fingerprint() == make_job("j", cron="0  4 * * *", activity="x.Y").schedule_fingerprint()
    )
    assert (
        base.schedule_fingerprint()
        != make_job("j", cron="0 4 * * *", tz="Europe/Paris", activity="x.Y").schedule_fingerprint()
    )
    assert (
        base.schedule_fingerprint()
        != make_job("j", cron="0 4 * * *", end="2031-01-01T00:00Z", activity="x.Y").schedule_fingerprint()
    )
    changed_args = make_job("j", cron="0 4 * * *", activity="x.Y", payload={"a": 1})
    assert changed_args.schedule_fingerprint() == base.schedule_fingerprint()
    assert changed_args.definition_fingerprint() != base.definition_fingerprint()
    assert (
        make_job("j", cron="0 4 * * *", activity="x.Y", queue="other").definition_fingerprint()
        != base.definition_fingerprint()
    )
