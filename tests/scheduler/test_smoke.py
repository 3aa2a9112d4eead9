import logging
from datetime import timedelta

from tests.scheduler.conftest import T0, events, iso, job


def test_one_tick_enqueues_the_due_occurrence_and_writes_the_record(env, scheduler_logs):
    core = env.core([job("a", every=timedelta(minutes=1))])
    first = core.tick(T0 + timedelta(seconds=30))
    assert first.created == ["a"] and first.repairs == []  # a first record is no repair
    (created,) = events(scheduler_logs, "periodic.record_created", logging.INFO)
    assert created.job_id == "a" and "Wrote the first record of periodic job 'a'" in created.getMessage()
    assert events(scheduler_logs, "periodic.record_repaired") == []
    assert iso(env.occurrences("a")) == ["2030-01-07T12:00:00Z"]
    record = env.record("a")
    assert record["last"] == "2030-01-07T12:00:00Z" and record["next"] == "2030-01-07T12:01:00Z"
    second = core.tick(T0 + timedelta(minutes=1, seconds=1))
    assert second.repairs == []
    assert iso(env.occurrences("a")) == ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z"]
