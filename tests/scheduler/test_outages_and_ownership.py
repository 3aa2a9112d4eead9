"""Failure cases 5, 6, 7, 9, 10 and 12 of the scheduler brief (real Postgres and Redis; the cases
with two schedulers run them in two processes)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from runnerq_django import metrics
from runnerq_django.scheduler.checks import cache_problems
from tests.helpers import REPO, manage_env, wait_until
from tests.scheduler import remote
from tests.scheduler.conftest import T0, events, iso, job, redis_cache
from tests.scheduler.remote import job_config

MIN = timedelta(minutes=1)
S = timedelta(seconds=1)


def _waiting_on_a_lock(backend_pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [backend_pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


@pytest.mark.direct_postgres(
    "it watches a scheduler's server session (by pid) wait for a lock; through the pooler its statements run "
    "on whichever server connection is free, not on the one whose pid it reported"
)
def test_case_5_owner_change_mid_tick_is_fenced_at_the_enqueue_and_at_the_record_write(
    env, remote_schedulers
):
    jobs = [job_config("a", coalesce=False)]
    old, new = remote_schedulers(env.config(jobs), env.config(jobs))  # two processes, two sessions
    assert old.tick(T0 + S)["report"]["owner"]

    # (a) The lease is stolen between the due computation and the enqueue: the enqueue is refused.
    assert old.call("plan", T0 + MIN + S)["report"]["due"] == {"a": ["2030-01-07T12:01:00Z"]}
    new.call("take_over")
    refused = old.call("enqueue")
    done = old.call("advance")["report"]
    assert done["fenced"] and done["enqueued"] == {} and done["written"] == []
    assert remote.events(refused, "periodic.fenced", "WARNING")
    assert env.record("a")["next"] == "2030-01-07T12:01:00Z"  # the old owner wrote nothing
    assert new.tick(T0 + MIN + 2 * S)["report"]["enqueued"] == {"a": ["2030-01-07T12:01:00Z"]}

    # (b) A takeover that comes while the old owner's enqueue transaction is open waits for it to
    # commit (the FOR SHARE on the lease row), and then the old owner's record write is refused.
    old.call("take_over")
    old.call("plan", T0 + 2 * MIN + S)
    held = old.call("enqueue", hold=True)
    assert held["holding"] and held["report"]["enqueued"] == {"a": ["2030-01-07T12:02:00Z"]}
    new.send("take_over")
    wait_until(
        lambda: _waiting_on_a_lock(new.backend_pid),
        timeout=10,
        message="the takeover to wait on the lease row",
    )
    time.sleep(0.2)
    assert not new.pending()  # still waiting for the old owner's commit
    assert len(env.occurrences("a")) == 2  # 12:02 is not committed yet
    old.call("commit")
    assert new.receive(10)["token"]  # the takeover went through once the enqueue had committed
    stale = old.call("advance")
    assert stale["report"]["fenced"] and stale["report"]["written"] == []
    assert remote.events(stale, "periodic.fenced", "WARNING")
    assert env.record("a")["next"] == "2030-01-07T12:02:00Z"  # still the new owner's record
    resumed = new.tick(T0 + 3 * MIN + S)["report"]  # the new owner: 12:02 dedupes, 12:03 is new
    assert resumed["existing"] == {"a": ["2030-01-07T12:02:00Z"]}
    assert resumed["enqueued"] == {"a": ["2030-01-07T12:03:00Z"]}
    assert iso(env.occurrences("a")) == [f"2030-01-07T12:0{m}:00Z" for m in range(4)]
    assert env.record("a")["by"]["node"] == new.node


def test_case_6_cache_down_runs_degraded_logs_once_and_recovers_with_one_repair_per_job(
    private_env, restartable_redis, scheduler_logs
):
    env = private_env
    jobs = [job("a"), job("b", cron="*/2 * * * *")]
    core = env.core(jobs)
    core.tick(T0 + S)
    restartable_redis.stop()
    scheduler_logs.clear()

    reports = [core.tick(T0 + m * MIN + S) for m in (1, 2, 3, 4)]
    assert all(r.degraded and r.written == [] and r.repairs == [] for r in reports)
    assert iso(env.occurrences("a")) == [f"2030-01-07T12:0{m}:00Z" for m in range(5)]
    assert iso(env.occurrences("b")) == [
        "2030-01-07T12:00:00Z",
        "2030-01-07T12:02:00Z",
        "2030-01-07T12:04:00Z",
    ]
    assert len(events(scheduler_logs, "periodic.cache_unavailable", logging.ERROR)) == 1
    assert metrics.gauge_value("periodic_cache_degraded", namespace=env.namespace) == 1
    # Back-off: inside it the cache is not even tried.
    tried = metrics.count("periodic_cache_errors", namespace=env.namespace)
    core.tick(T0 + 4 * MIN + 2 * S)
    assert metrics.count("periodic_cache_errors", namespace=env.namespace) == tried

    restartable_redis.start()  # an empty Redis: every record is missing
    back = core.tick(T0 + 5 * MIN + S)
    assert not back.degraded and sorted(back.repairs) == [
        ("a", "missing", "db_evidence"),
        ("b", "missing", "db_evidence"),
    ]
    assert {r.job_id: r.after_outage for r in events(scheduler_logs, "periodic.record_repaired")} == {
        "a": True,
        "b": True,
    }
    assert len(events(scheduler_logs, "periodic.cache_recovered")) == 1
    assert core.tick(T0 + 5 * MIN + 2 * S).repairs == []
    assert env.record("a")["next"] == "2030-01-07T12:06:00Z"
    assert iso(env.occurrences("a")) == [f"2030-01-07T12:0{m}:00Z" for m in range(6)]


def test_case_6_with_ignore_exceptions_an_outage_is_still_an_outage_not_an_eviction(
    private_env, restartable_redis, scheduler_logs
):
    # django-redis's IGNORE_EXCEPTIONS would turn every read of an outage into a miss (a repair
    # storm); the scheduler reads through the redis-py client, so it sees the outage itself.
    env = private_env
    env.cache = redis_cache(restartable_redis.url, IGNORE_EXCEPTIONS=True)
    core = env.core([job("a")])
    core.tick(T0 + S)
    restartable_redis.stop()
    reports = [core.tick(T0 + minutes * MIN + S) for minutes in (1, 2, 3)]
    assert all(r.degraded and r.repairs == [] for r in reports)
    assert len(events(scheduler_logs, "periodic.cache_unavailable", logging.ERROR)) == 1
    assert iso(env.occurrences("a")) == [f"2030-01-07T12:0{m}:00Z" for m in range(4)]
    caches = {
        "runnerq_scheduler": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": restartable_redis.url,
            "OPTIONS": {"IGNORE_EXCEPTIONS": True},
        }
    }
    with override_settings(CACHES=caches):
        assert cache_problems() == []  # nothing to warn about any more


def test_case_7_clock_jumps_forward_and_back_with_the_wall_clock_frozen_and_moved(env, scheduler_logs):
    from freezegun import freeze_time

    ticks = iter(range(1000))
    jobs = [
        job("coalesced"),
        job("capped", coalesce=False, max_catch_up=3, misfire_grace=timedelta(minutes=10)),
    ]
    with freeze_time(T0 + S) as frozen:
        core = env.core(jobs, clock=timezone.now, monotonic=lambda: float(next(ticks)))
        core.tick()
        frozen.move_to(T0 + timedelta(hours=5) + S)  # the wall clock jumps 5 h, the monotonic one 1 s
        forward = core.tick()
        assert forward.enqueued == {
            "coalesced": [T0 + timedelta(hours=5)],
            "capped": [T0 + timedelta(hours=4, minutes=51 + m) for m in range(3)],
        }
        # Grace drops the stale ones (1 h for the coalesced job, 10 min for the capped one).
        assert forward.dropped == {"coalesced": 240, "capped": 290}
        assert len(events(scheduler_logs, "periodic.clock_jump", logging.WARNING)) == 1
        before = {name: env.record(name) for name in ("coalesced", "capped")}

        frozen.move_to(T0 + timedelta(hours=4, minutes=50) + S)  # and back 10 minutes
        backward = core.tick()
        assert backward.enqueued == {}
        assert {name: env.record(name)["last"] for name in before} == {
            n: r["last"] for n, r in before.items()
        }
        assert len(events(scheduler_logs, "periodic.clock_jump", logging.WARNING)) == 2
    assert len(env.occurrences("coalesced")) == 2 and len(env.occurrences("capped")) == 4


def test_case_7_two_nodes_skewed_by_90_seconds_enqueue_the_same_keys(env, remote_schedulers):
    jobs = [job_config("a", coalesce=False)]
    # Two processes. The slow node keeps its records apart (another key prefix), so it plans from
    # its own view and Postgres evidence, and really attempts the occurrences the fast node
    # already enqueued.
    fast, slow = remote_schedulers(
        env.config(jobs, fencing=False), env.config(jobs, fencing=False, key_prefix="slow")
    )
    skew = timedelta(seconds=90)
    first_seen = {}
    deduped = []
    for step in range(12):  # true time 12:00:30 ... 12:06:00, every 30 s
        true = T0 + timedelta(seconds=30 * (step + 1))
        for node, now in ((fast, true + skew), (slow, true - skew)):
            report = node.tick(now)["report"]
            for occurrence in report["enqueued"].get("a", []):
                first_seen.setdefault(occurrence, (node is fast, true))
            if node is slow:
                deduped += report["existing"].get("a", [])
    occurrences = env.occurrences("a")
    assert len(occurrences) == len(set(occurrences))  # one activity per key, whoever ran first
    # The fast node started the job at 12:02 (its first look) and reached 12:07; no gaps, no repeats.
    assert iso(occurrences) == [f"2030-01-07T12:0{m}:00Z" for m in range(2, 8)]
    # Skew only shifts *when*: the fast node enqueued each occurrence 90 s early, the slow one deduped.
    assert all(by_fast for by_fast, _ in first_seen.values())
    assert len(deduped) >= 2 and set(deduped) <= set(first_seen)  # same keys, found already taken


def test_case_9_a_lost_or_expired_lease_never_opens_record_writes_to_everyone(env, remote_schedulers):
    jobs = [job_config("a", coalesce=False)]
    # A 2 s lease: after the first takes over, the second must try its renewal while the first's
    # lease still runs, and on a loaded machine (CI's PgBouncer pass) two remote ticks took more
    # than the 0.6 s this test once used.
    first, second = remote_schedulers(env.config(jobs, lease_seconds=2), env.config(jobs, lease_seconds=2))
    writers = []

    def tick(node, now):
        report = node.tick(now)["report"]
        writers.append((now, node.node, report["writer"], bool(report["written"])))
        return report

    tick(first, T0 + S)
    tick(second, T0 + S)
    with connection.cursor() as cursor:  # the lease row is lost
        cursor.execute("DELETE FROM runnerq_periodic_lease WHERE namespace = %s", [env.namespace])
    time.sleep(0.7)  # past the non-owner's retry interval (a third of the lease)
    taken = tick(second, T0 + MIN + S)
    assert taken["owner"] and taken["enqueued"] == {"a": ["2030-01-07T12:01:00Z"]}
    stale = tick(first, T0 + MIN + 2 * S)  # its renewal finds the row taken: it writes nothing
    assert not stale["writer"] and stale["written"] == []

    # The owner stops renewing; after expiry the other takes over, and the first stays out.
    time.sleep(2.1)
    again = tick(first, T0 + 2 * MIN + S)
    assert again["owner"] and again["enqueued"] == {"a": ["2030-01-07T12:02:00Z"]}
    late = tick(second, T0 + 2 * MIN + 2 * S)
    assert not late["writer"] and late["written"] == []
    for now in {w[0] for w in writers}:
        assert sum(1 for w in writers if w[0] == now and w[3]) <= 1  # never two record writers
    assert iso(env.occurrences("a")) == [
        "2030-01-07T12:00:00Z",
        "2030-01-07T12:01:00Z",
        "2030-01-07T12:02:00Z",
    ]


def _terminate(pid: int, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.direct_postgres(
    "it kills its own server session by pid to make the enqueue fail; through the pooler the next "
    "statement runs on another server connection and nothing fails"
)
def test_case_10_postgres_failing_during_the_enqueue_advances_nothing_and_the_next_tick_catches_up(
    env, live_db_url, scheduler_logs
):
    core = env.core([job("a")], fencing=False)
    core.tick(T0 + S)

    plan = core.plan(T0 + MIN + S)
    _terminate(_backend_pid(), live_db_url)  # the database goes away under the enqueue
    core.enqueue(plan)
    core.advance(plan)
    assert plan.report.db_error and plan.report.enqueued == {} and plan.report.written == []
    assert env.record("a")["next"] == "2030-01-07T12:01:00Z"  # not advanced
    assert events(scheduler_logs, "periodic.database_unavailable", logging.ERROR)

    _terminate(_backend_pid(), live_db_url)  # and once more, at the start of a tick
    failed = core.tick(T0 + MIN + 5 * S)
    assert failed.db_error and failed.enqueued == {}

    recovered = core.tick(T0 + MIN + 10 * S)  # inside the grace: nothing is lost
    assert recovered.db_error is None and recovered.enqueued == {"a": [T0 + MIN]}
    assert env.record("a")["next"] == "2030-01-07T12:02:00Z"
    assert iso(env.occurrences("a")) == ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z"]


def test_case_12_a_crash_between_enqueue_commit_and_record_write_is_a_no_op_on_the_next_tick(
    env, live_db_url, redis_url
):
    core = env.core([job("a")])
    core.tick(T0 + S)
    core.close()
    config = {
        "namespace": env.namespace,
        "cache_url": redis_url,
        "jobs": [{"id": "a", "every_s": 60}],
        "ticks": ["2030-01-07T12:01:01Z"],
        "crash_after_enqueue": True,
        "lease_seconds": 1,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.scheduler.proc", json.dumps(config)],
        cwd=REPO,
        env=manage_env(live_db_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stdout + proc.stderr
    crashed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert crashed["enqueued"] == {"a": ["2030-01-07T12:01:00Z"]}
    assert env.record("a")["next"] == "2030-01-07T12:01:00Z"  # the record write never happened

    survivor = env.core([job("a")], lease_seconds=1)
    time.sleep(1.1)  # the crashed owner's lease expires
    report = survivor.tick(T0 + MIN + 3 * S)
    assert report.existing == {"a": [T0 + MIN]} and report.enqueued == {}  # re-enqueue: a no-op
    assert env.record("a")["next"] == "2030-01-07T12:02:00Z"  # then it advances
    assert iso(env.occurrences("a")) == ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z"]


@pytest.fixture(autouse=True)
def _fresh_connection():
    yield
    connection.close()
