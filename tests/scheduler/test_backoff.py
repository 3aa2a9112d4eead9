"""A job whose enqueue keeps failing for a reason other than the database (here: a payload the
queue refuses) is retried with back-off, logged once per failure streak and once on recovery,
and never busy-loops. Real Postgres and Redis; the queue's own refusal, no stand-ins."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

from runnerq_django.scheduler import service
from runnerq_django.scheduler.checks import declaration_errors
from runnerq_django.scheduler.declarations import make_job
from tests.scheduler.conftest import T0, events, iso, job

S = timedelta(seconds=1)
BIG = {"blob": "x" * 2000}  # 2 kB of JSON
SMALL_LIMIT = {**django_settings.RUNNERQ, "MAX_PAYLOAD_BYTES": 1000}


def test_a_refused_enqueue_backs_off_exponentially_up_to_max_interval_and_logs_once(env, scheduler_logs):
    core = env.core([job("big", payload=BIG)], max_interval=5)
    with override_settings(RUNNERQ=SMALL_LIMIT):
        first = core.tick(T0 + S)
        assert "at most 1000 bytes" in first.failed["big"] and first.enqueued == {}
        assert first.retrying == {"big": T0 + 2 * S} and first.sleep == 1.0  # not 0: no busy loop
        waiting = core.tick(T0 + 1.5 * S)  # inside the back-off the job is not even tried
        assert waiting.failed == {} and waiting.retrying == {"big": T0 + 2 * S} and waiting.sleep == 0.5
        retries = {}
        for at in (2, 4, 8):  # 1 s, 2 s, 4 s, then capped at max_interval (5 s)
            report = core.tick(T0 + at * S)
            assert report.failed, at
            retries[at] = report.retrying["big"]
        assert retries == {2: T0 + 4 * S, 4: T0 + 8 * S, 8: T0 + 13 * S}
    assert env.occurrences("big") == [] and env.record("big") is None  # nothing enqueued, nothing advanced
    assert len(events(scheduler_logs, "periodic.enqueue_failed", logging.ERROR)) == 1  # one per streak
    assert len(events(scheduler_logs, "periodic.enqueue_still_failing", logging.DEBUG)) == 3

    recovered = core.tick(T0 + 13 * S)  # the limit is back to the default: it goes through
    assert recovered.enqueued == {"big": [T0]} and recovered.failed == {} and recovered.retrying == {}
    assert iso(env.occurrences("big")) == ["2030-01-07T12:00:00Z"]  # the due occurrence was kept, not lost
    (line,) = events(scheduler_logs, "periodic.enqueue_recovered", logging.INFO)
    assert line.failures == 4 and line.failing_s == 12.0 and "at most 1000 bytes" in line.last_error


def test_the_scheduler_loop_does_not_spin_while_an_enqueue_keeps_failing(env, scheduler_logs):
    core = env.core([job("big", payload=BIG)], max_interval=5)  # the real clock (Postgres now())
    stop = threading.Event()
    runner = service.SchedulerService(core)
    with override_settings(RUNNERQ=SMALL_LIMIT):
        thread = threading.Thread(target=runner.run, args=(stop,))
        thread.start()
        time.sleep(2.5)
        stop.set()
        thread.join(10)
    # Attempts at about 0 s, 1 s and 3 s (back-off 1 s, 2 s ...): a handful of ticks, not hundreds.
    assert 1 <= runner.ticks <= 4, runner.ticks
    assert len(events(scheduler_logs, "periodic.enqueue_failed", logging.ERROR)) == 1
    connection.close()


def test_the_checks_refuse_a_payload_the_queue_would_refuse():
    declared = [
        make_job("big", every=60, activity="x.Y", payload=BIG),
        make_job("object", every=60, activity="x.Y", payload={"when": object()}),
        make_job("fine", every=60, activity="x.Y", payload={"blob": "x" * 500}),
    ]
    with override_settings(RUNNERQ=SMALL_LIMIT):
        errors = declaration_errors(declared, "default")
    assert [(e.id, e.msg.split(":")[0]) for e in errors] == [
        ("runnerq.E102", "Periodic job 'big'"),
        ("runnerq.E102", "Periodic job 'object'"),
    ]
    assert "JSON text must be at most 1000 bytes" in errors[0].msg
    assert "payload['when']: object is not JSON-serializable" in errors[1].msg


def test_a_very_long_failure_streak_keeps_the_back_off_at_max_interval(env):
    from runnerq_django.scheduler.tick import FailureStreak

    core = env.core([job("big", payload=BIG)], max_interval=5)
    with override_settings(RUNNERQ=SMALL_LIMIT):
        core.tick(T0 + S)
        streak = core._failing["big"]
        core._failing["big"] = FailureStreak(
            streak.since, T0 + 2 * S, 1100, streak.error
        )  # ~1.5 h of failures
        report = core.tick(T0 + 2 * S)  # the doubling must not overflow a float
    assert report.retrying == {"big": T0 + 7 * S} and report.failed
