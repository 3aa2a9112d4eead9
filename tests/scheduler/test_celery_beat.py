"""The Celery beat scheduler: per-entry records, the Postgres occurrence guard before every send,
one sending owner among several beats. Real Celery (Redis broker), real Postgres and Redis."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta

import psycopg
import pytest
import redis
from celery import Celery
from celery.schedules import crontab, schedstate, schedule
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

from runnerq_django.logs import event_of
from runnerq_django.scheduler import records
from runnerq_django.scheduler.celery_beat import RunnerQScheduler, anchored, task_id_for
from runnerq_django.scheduler.enqueue import idempotency_key
from tests.helpers import REPO, wait_until
from tests.scheduler.conftest import JSON_SERIALIZER, T0, UTC, events, process_env, raw_redis

S = timedelta(seconds=1)
MIN = timedelta(minutes=1)


def _sent(client, queue: str) -> list[tuple[str, str, str]]:
    """(task id, task name, nominal occurrence) of every message in the broker queue."""
    out = []
    for raw in client.lrange(queue, 0, -1):
        headers = json.loads(raw)["headers"]
        out.append((headers["id"], headers["task"], headers["periodic_occurrence"]))
    return sorted(out, key=lambda m: (m[2], m[1]))


@pytest.fixture
def beat_world(transactional_db, namespace, redis_url):
    queue = f"beat-{namespace}"
    broker = redis_url.rsplit("/", 1)[0] + "/2"
    client = redis.Redis.from_url(broker)
    app = Celery("beat-in-process", broker=broker)
    app.conf.timezone = "UTC"
    # These tests start at an occurrence and want it sent: catch_up_after_repair (stock beat, and
    # the default, send nothing at start: test_a_new_entry_sends_nothing_at_start_like_stock_beat).
    options = {"queue": queue, "runnerq": {"catch_up_after_repair": True}}
    app.conf.beat_schedule = {
        "minutely": {"task": "tests.scheduler.minutely", "schedule": 60.0, "options": options},
        "every five": {
            "task": "tests.scheduler.five",
            "schedule": crontab(minute="*/5"),
            "args": (1, 2),
            "options": options,
        },
        "anchored": {
            "task": "tests.scheduler.anchored",
            "options": options,
            "schedule": anchored(timedelta(minutes=2), anchor="2030-01-07T11:59:00Z"),
        },
    }
    settings = {"SCHEDULER": {"NAMESPACE": namespace}}
    # The scheduler's alias on the real Redis, whatever the test project fell back to.
    cache_settings = {
        **django_settings.CACHES,
        "runnerq_scheduler": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": redis_url,
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient", "SERIALIZER": JSON_SERIALIZER},
        },
    }
    with override_settings(RUNNERQ=settings, CACHES=cache_settings):
        from django.core.cache import caches

        yield app, client, queue, namespace
        client.delete(queue)
        cache_client = raw_redis(caches["runnerq_scheduler"])
        for key in cache_client.scan_iter(match=f"*periodic:v1:{namespace}:*"):
            cache_client.delete(key)


def test_beat_scheduler_sends_each_occurrence_once_and_only_from_the_owner(beat_world):
    from django.core.cache import caches

    app, client, queue, namespace = beat_world
    first = RunnerQScheduler(app=app)
    second = RunnerQScheduler(app=app)  # another beat process
    first.tick(now=T0 + S)
    first.tick(now=T0 + S)  # the same instant again: nothing more
    assert second.tick(now=T0 + MIN + S) <= second.max_interval and not second.last_report.owner
    assert _sent(client, queue) == [
        (
            task_id_for(idempotency_key(namespace, "beat:anchored", T0 - MIN)),
            "tests.scheduler.anchored",
            "2030-01-07T11:59:00Z",
        ),
        (
            task_id_for(idempotency_key(namespace, "beat:every five", T0)),
            "tests.scheduler.five",
            "2030-01-07T12:00:00Z",
        ),
        (
            task_id_for(idempotency_key(namespace, "beat:minutely", T0)),
            "tests.scheduler.minutely",
            "2030-01-07T12:00:00Z",
        ),
    ]

    # One record per entry, holding the nominal occurrence (never the send time).
    cache = caches["runnerq_scheduler"]
    key = records.key_for(namespace, "beat:minutely")
    assert cache.get(key)["last"] == "2030-01-07T12:00:00Z"
    assert cache.get(records.key_for(namespace, "beat:every%20five"))["next"] == "2030-01-07T12:05:00Z"

    # The record is evicted: the guard's evidence rebuilds it, and nothing is sent twice.
    cache.delete(key)
    first.tick(now=T0 + MIN + 2 * S)
    assert ("beat:minutely", "missing", "db_evidence") in first.last_report.repairs
    assert first.schedule["minutely"].last_run_at == T0 + MIN
    first.tick(now=T0 + 3 * MIN + S)
    sent = _sent(client, queue)
    assert len({m[0] for m in sent}) == len(sent)
    assert [m[2] for m in sent if m[1] == "tests.scheduler.minutely"] == [
        "2030-01-07T12:00:00Z",
        "2030-01-07T12:01:00Z",
        "2030-01-07T12:03:00Z",
    ]  # coalesced 12:02
    assert [m[2] for m in sent if m[1] == "tests.scheduler.anchored"] == [
        "2030-01-07T11:59:00Z",
        "2030-01-07T12:01:00Z",
        "2030-01-07T12:03:00Z",
    ]
    with pytest.raises(NotImplementedError, match=r"'minutely' now.*app\.send_task\("):
        first.apply_async(first.schedule["minutely"])  # stock advance-then-send is closed
    first.close()  # beat stops: it hands the lease over at once
    assert second.core.lease.ensure(force=True)


class NeverDue(schedule):
    """Celery's documented extension point: a schedule that decides for itself (never, here)."""

    def is_due(self, last_run_at):
        return schedstate(False, 5.0)


class WeekdaysOnly(crontab):
    def remaining_estimate(self, last_run_at):
        return super().remaining_estimate(last_run_at)


class Described(schedule):
    """A subclass that changes nothing about when it is due: an interval like any other."""

    def __repr__(self):
        return f"<described every {self.run_every}>"


def test_a_schedule_that_decides_when_it_is_due_is_refused_naming_the_entry(beat_world):
    app, client, queue, _ = beat_world
    app.conf.beat_schedule = {"never": {"task": "tests.scheduler.never", "schedule": NeverDue(30.0)}}
    with pytest.raises(ValueError, match=r"beat entry 'never': its schedule .*NeverDue overrides is_due\(\)"):
        RunnerQScheduler(app=app)
    app.conf.beat_schedule = {"weekdays": {"task": "tests.scheduler.w", "schedule": WeekdaysOnly(minute="0")}}
    with pytest.raises(ValueError, match=r"'weekdays'.*WeekdaysOnly overrides remaining_estimate\(\)"):
        RunnerQScheduler(app=app)
    assert client.llen(queue) == 0
    app.conf.beat_schedule = {
        "described": {
            "task": "tests.scheduler.described",
            "schedule": Described(timedelta(minutes=1)),
            "options": {"queue": queue, "runnerq": {"catch_up_after_repair": True}},
        }
    }
    RunnerQScheduler(app=app).tick(now=T0 + S)
    assert [m[2] for m in _sent(client, queue)] == ["2030-01-07T12:00:00Z"]


def test_a_new_entry_sends_nothing_at_start_like_stock_beat(beat_world):
    """Stock beat sends an interval entry first one interval after start; ours first sends the
    first occurrence after start (the lattice's), never the one before it at once."""
    app, client, queue, _ = beat_world
    app.conf.beat_schedule = {
        "hourly": {"task": "tests.scheduler.hourly", "schedule": 3600.0, "options": {"queue": queue}},
        "daily": {
            "task": "tests.scheduler.daily",
            "schedule": crontab(minute="0", hour="12"),
            "options": {"queue": queue},
        },
        "caught up": {
            "task": "tests.scheduler.caught_up",
            "schedule": 3600.0,
            "options": {"queue": queue, "runnerq": {"catch_up_after_repair": True}},
        },
    }
    beat = RunnerQScheduler(app=app)
    beat.tick(now=T0 + 40 * MIN)  # started at 12:40
    assert [(m[1], m[2]) for m in _sent(client, queue)] == [
        ("tests.scheduler.caught_up", "2030-01-07T12:00:00Z")
    ]
    assert beat.last_report.views["beat:hourly"].next == T0 + 60 * MIN
    beat.tick(now=T0 + 60 * MIN + S)
    assert [(m[1], m[2]) for m in _sent(client, queue)] == [
        ("tests.scheduler.caught_up", "2030-01-07T12:00:00Z"),
        ("tests.scheduler.caught_up", "2030-01-07T13:00:00Z"),
        ("tests.scheduler.hourly", "2030-01-07T13:00:00Z"),
    ]


def test_entries_changed_after_set_up_are_sent(beat_world):
    """add(), update_from_dict() and merge_inplace() (django-celery-beat and other tools call
    them) change what the next tick sends; a bad entry is refused and changes nothing."""
    app, client, queue, _ = beat_world
    beat = RunnerQScheduler(app=app)
    beat.tick(now=T0 - 2 * MIN + S)
    beat.add(name="added", task="tests.scheduler.added", schedule=60.0, options={"queue": queue})
    beat.update_from_dict(
        {"from dict": {"task": "tests.scheduler.from_dict", "schedule": 60.0, "options": {"queue": queue}}}
    )
    beat.tick(now=T0 + S)  # first seen: their first occurrence is 12:01
    beat.tick(now=T0 + MIN + S)

    def sent(task):
        return [m[2] for m in _sent(client, queue) if m[1] == task]

    assert sent("tests.scheduler.added") == sent("tests.scheduler.from_dict") == ["2030-01-07T12:01:00Z"]

    names = sorted(beat.schedule)
    with pytest.raises(ValueError, match=r"beat entry 'bad'.*NeverDue"):
        beat.add(name="bad", task="tests.scheduler.bad", schedule=NeverDue(60.0))
    with pytest.raises(ValueError, match="beat entry 'bad'"):
        beat.merge_inplace(
            {
                "added": {"task": "tests.scheduler.renamed", "schedule": 60.0},
                "bad": {"task": "x", "schedule": NeverDue(1.0)},
            }
        )
    assert sorted(beat.schedule) == names and beat.schedule["added"].task == "tests.scheduler.added"
    assert sorted(spec.job_id for spec in beat.core.specs) == [f"beat:{name}" for name in names]

    beat.merge_inplace(
        {"merged": {"task": "tests.scheduler.merged", "schedule": 60.0, "options": {"queue": queue}}}
    )
    assert sorted(beat.schedule) == ["merged"]
    beat.tick(now=T0 + 2 * MIN + S)
    beat.tick(now=T0 + 3 * MIN + S)
    assert sent("tests.scheduler.merged") == ["2030-01-07T12:03:00Z"]
    assert sent("tests.scheduler.added") == ["2030-01-07T12:01:00Z"]  # removed: nothing more
    assert sent("tests.scheduler.minutely")[-1] == "2030-01-07T12:01:00Z"


def test_a_refused_send_releases_the_guard_and_is_retried(beat_world, scheduler_logs):
    from tests.helpers import free_port

    app, _client, _queue, namespace = beat_world
    app.conf.broker_url = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
    app.conf.broker_connection_retry = False
    app.conf.broker_connection_max_retries = 0
    app.conf.task_publish_retry = False
    beat = RunnerQScheduler(app=app)
    beat.tick(now=T0 + S)
    assert [r.levelname for r in scheduler_logs.records if event_of(r) == "periodic.beat_send_failed"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_periodic_occurrences WHERE namespace = %s", [namespace])
        assert cursor.fetchone()[0] == 0  # the guard was released: the next tick tries again
    assert beat.last_report.views["beat:minutely"].next == T0  # not advanced past the unsent occurrence


def test_an_unreachable_broker_is_retried_with_back_off_not_on_every_tick(beat_world, scheduler_logs):
    from tests.helpers import free_port

    app, _client, _queue, namespace = beat_world
    app.conf.broker_url = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
    app.conf.broker_connection_retry = False
    app.conf.broker_connection_max_retries = 0
    beat = RunnerQScheduler(app=app)
    ticks = 0
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:  # what celery.beat.Service does: tick, sleep what it says
        interval = beat.tick()
        ticks += 1
        time.sleep(interval)
    # Attempts at about 0 s, 1 s and 3 s (back-off 1 s, 2 s ...), not a tick per millisecond.
    assert 1 <= ticks <= 4, ticks
    failed = events(scheduler_logs, "periodic.beat_send_failed", logging.ERROR)
    assert sorted(r.job_id for r in failed) == [
        "beat:anchored",
        "beat:every five",
        "beat:minutely",
    ]  # one each
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_periodic_occurrences WHERE namespace = %s", [namespace])
        assert cursor.fetchone()[0] == 0  # refused before anything was sent: no guard kept


@pytest.fixture
def sleepy_redis(tmp_path):
    """A redis-server of the test's own with DEBUG enabled: ``DEBUG SLEEP`` stalls it while a
    client's command waits in its socket, so the client times out although the command runs."""
    import shutil

    from tests.helpers import free_port, start_redis_server

    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = start_redis_server(binary, port, tmp_path, "--enable-debug-command", "yes")
    url = f"redis://127.0.0.1:{port}/0"
    yield url
    proc.kill()
    proc.wait()


def test_a_send_that_times_out_after_the_broker_took_it_is_never_sent_again(
    beat_world, sleepy_redis, scheduler_logs
):
    import threading

    app, _, queue, namespace = beat_world
    app.conf.broker_url = sleepy_redis
    app.conf.broker_transport_options = {"socket_timeout": 0.5, "socket_connect_timeout": 1}
    app.conf.broker_connection_max_retries = 0
    app.conf.beat_schedule = {
        "minutely": {
            "task": "tests.scheduler.minutely",
            "schedule": 60.0,
            "options": {"queue": queue, "runnerq": {"coalesce": False, "catch_up_after_repair": True}},
        }
    }
    broker = redis.Redis.from_url(sleepy_redis)
    beat = RunnerQScheduler(app=app)
    # Connected, and the queue declared, before the broker stalls; then an empty queue again.
    app.send_task("tests.scheduler.warm_up", queue=queue, producer=beat.producer)
    broker.delete(queue)

    # The broker stalls while the send waits in its socket: the client times out (an error), yet
    # the broker runs the LPUSH once it wakes. The beat cannot know: it must not send again.
    stall = threading.Thread(
        target=lambda: redis.Redis.from_url(sleepy_redis).execute_command("DEBUG", "SLEEP", "1.5")
    )
    stall.start()
    time.sleep(0.2)
    beat.tick(now=T0 + S)
    stall.join()
    wait_until(lambda: broker.llen(queue) == 1, timeout=5, message="the stalled send to land")
    (uncertain,) = events(scheduler_logs, "periodic.beat_send_uncertain", logging.ERROR)
    key = idempotency_key(namespace, "beat:minutely", T0)
    assert (uncertain.key, uncertain.task_id) == (key, task_id_for(key)) and "Timeout" in uncertain.error

    beat.tick(now=T0 + 5 * S)  # after the back-off: nothing more for 12:00
    beat.tick(now=T0 + MIN + S)  # the next occurrence goes out normally
    sent = _sent(broker, queue)
    assert [m[2] for m in sent] == ["2030-01-07T12:00:00Z", "2030-01-07T12:01:00Z"]  # each once
    assert sent[0][0] == task_id_for(key)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT occurrence, sent_at IS NOT NULL FROM runnerq_periodic_occurrences "
            "WHERE namespace = %s ORDER BY occurrence",
            [namespace],
        )
        assert cursor.fetchall() == [(T0, False), (T0 + MIN, True)]  # the uncertain guard is kept
    assert len(events(scheduler_logs, "periodic.beat_send_recovered", logging.INFO)) == 1


@pytest.mark.slow
def test_a_beat_that_dies_between_guard_and_send_is_reported_by_the_next_owner_and_never_sent(
    live_db_url, private_redis
):
    import threading
    import uuid

    from runnerq_django.scheduler.celery_beat import EXIT_AFTER_GUARD_ENV

    namespace = f"bc{uuid.uuid4().hex[:8]}"
    queue = "beat-crash"
    broker = private_redis["url"].rsplit("/", 1)[0] + "/1"
    env = process_env(
        live_db_url,
        scheduler={"NAMESPACE": namespace, "LEASE_SECONDS": 3, "MAX_INTERVAL_SECONDS": 1},
        REDIS_URL=private_redis["url"],
        RQ_BEAT_BROKER=broker,
        RQ_BEAT_QUEUE=queue,
    )
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tests.scheduler.celery_app",
        "beat",
        "--loglevel",
        "INFO",
        "-S",
        "runnerq_django.scheduler.celery_beat:RunnerQScheduler",
    ]
    client = redis.Redis.from_url(broker)

    # The first beat takes the lease, commits the guard of its first occurrence, and dies.
    crashed = subprocess.run(
        command, cwd=REPO, env={**env, EXIT_AFTER_GUARD_ENV: "1"}, capture_output=True, text=True, timeout=60
    )
    assert crashed.returncode == 70, crashed.stdout + crashed.stderr
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idempotency_key, occurrence, sent_at FROM runnerq_periodic_occurrences "
            "WHERE namespace = %s",
            [namespace],
        )
        ((lost_key, lost, sent_at),) = cursor.fetchall()
    assert sent_at is None and client.llen(queue) == 0

    # Another beat takes over once that lease expires, sends on, and reports exactly that key.
    successor = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(successor.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: any("periodic.beat_unsent" in line for line in lines),
            timeout=30,
            message="the successor's periodic.beat_unsent",
        )
        wait_until(lambda: client.llen(queue) >= 3, timeout=15, message="sends after the takeover")
        time.sleep(2.5)  # more unsent scans: the report must not repeat
    finally:
        os.killpg(successor.pid, signal.SIGTERM)
        successor.wait(30)
        reader.join(5)
    reported = [line for line in lines if "periodic.beat_unsent" in line]
    assert len(reported) == 1, lines
    assert " WARNING " in reported[0] and f"occurrence={records.format_instant(lost)}" in reported[0]
    assert task_id_for(lost_key) in reported[0] and 'job_id="beat:every second"' in reported[0]

    sent = _sent(client, queue)
    ids = [m[0] for m in sent]
    assert len(ids) == len(set(ids)) and task_id_for(lost_key) not in ids  # never sent, nothing twice
    assert records.format_instant(lost) not in [m[2] for m in sent]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idempotency_key FROM runnerq_periodic_occurrences "
            "WHERE namespace = %s AND sent_at IS NULL",
            [namespace],
        )
        assert cursor.fetchall() == [(lost_key,)]  # every other guard was sent and confirmed


@pytest.mark.slow
def test_sigterm_while_a_tick_waits_on_the_database_stops_the_beat(live_db_url, private_redis):
    """Celery beat's SIGTERM handler closes the scheduler. Arriving while the tick is inside a
    database call (here: the lease renewal waits on a row lock), a close() that talked to the
    database on that connection would wait forever for the connection's own lock."""
    import uuid

    namespace = f"bt{uuid.uuid4().hex[:8]}"
    broker = private_redis["url"].rsplit("/", 1)[0] + "/1"
    env = process_env(
        live_db_url,
        scheduler={"NAMESPACE": namespace, "LEASE_SECONDS": 3, "MAX_INTERVAL_SECONDS": 1},
        REDIS_URL=private_redis["url"],
        RQ_BEAT_BROKER=broker,
        RQ_BEAT_QUEUE="beat-sigterm",
    )
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tests.scheduler.celery_app",
        "beat",
        "--loglevel",
        "INFO",
        "-S",
        "runnerq_django.scheduler.celery_beat:RunnerQScheduler",
    ]
    beat = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _owner_pid(namespace) == beat.pid, timeout=30, message="the beat to own its lease")
        with psycopg.connect(live_db_url) as blocker:  # a transaction that holds the lease row
            blocker.execute(
                "SELECT 1 FROM runnerq_periodic_lease WHERE namespace = %s FOR UPDATE", [f"{namespace}:beat"]
            )
            wait_until(lambda: _waiting_on_lease(live_db_url), timeout=10, message="the renewal to wait")
            os.killpg(beat.pid, signal.SIGTERM)
            time.sleep(1)
            blocker.rollback()
        beat.wait(timeout=15)
    finally:
        if beat.poll() is None:
            os.killpg(beat.pid, signal.SIGKILL)
            output = beat.communicate()[0]
            raise AssertionError(f"the beat did not stop on SIGTERM:\n{output}")
    assert beat.returncode == 0, beat.communicate()[0]


def _waiting_on_lease(db_url: str) -> bool:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return (
            conn.execute(
                # This database's sessions only: another test run on the server may wait too.
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE '%%runnerq_periodic_lease%%'"
            ).fetchone()[0]
            > 0
        )


def _owner_pid(namespace: str) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT owner FROM runnerq_periodic_lease WHERE namespace = %s AND expires_at > now()",
            [f"{namespace}:beat"],
        )
        row = cursor.fetchone()
    return int(row[0].split(":")[-2]) if row else None


@pytest.mark.slow
def test_several_celery_beat_processes_send_each_occurrence_once_across_an_owner_crash(
    live_db_url, private_redis
):
    namespace = "beatmp"
    queue = "beat-processes"
    broker = private_redis["url"].rsplit("/", 1)[0] + "/1"
    env = process_env(
        live_db_url,
        scheduler={"NAMESPACE": namespace, "LEASE_SECONDS": 3, "MAX_INTERVAL_SECONDS": 1},
        REDIS_URL=private_redis["url"],
        RQ_BEAT_BROKER=broker,
        RQ_BEAT_QUEUE=queue,
    )
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tests.scheduler.celery_app",
        "beat",
        "--loglevel",
        "INFO",
        "-S",
        "runnerq_django.scheduler.celery_beat:RunnerQScheduler",
    ]
    procs = [
        subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for _ in range(3)
    ]
    client = redis.Redis.from_url(broker)
    try:
        wait_until(lambda: client.llen(queue) >= 3, timeout=30, message="the first sends")
        owner = _owner_pid(namespace)
        victim = next(p for p in procs if p.pid == owner)
        os.killpg(victim.pid, signal.SIGKILL)  # the sending beat dies mid-flight
        killed_at = datetime.now(UTC)
        time.sleep(8)  # its lease (3 s) expires, another beat takes over and catches up
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        outputs = [proc.communicate(timeout=30)[0] for proc in procs]
    assert victim.returncode == -signal.SIGKILL

    sent = _sent(client, queue)
    ids = [m[0] for m in sent]
    occurrences = [m[2] for m in sent]
    assert len(ids) == len(set(ids)) and len(occurrences) == len(set(occurrences)), sent  # never twice
    parsed = [records.parse_instant(o) for o in occurrences]
    assert parsed[-1] > killed_at  # sending went on after the crash
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT occurrence, node, sent_at IS NOT NULL FROM runnerq_periodic_occurrences "
            "WHERE namespace = %s ORDER BY occurrence",
            [namespace],
        )
        guards = cursor.fetchall()
    unsent = {g[0] for g in guards if not g[2]}
    # Every second from the first to the last send went out, except at most one occurrence that
    # the crash caught between its guard and its send (documented: at most once, never twice).
    expected = {parsed[0] + k * S for k in range(int((parsed[-1] - parsed[0]).total_seconds()) + 1)}
    missing = expected - set(parsed)
    assert missing <= unsent and len(missing) <= 1, (missing, outputs)
    senders = {g[1] for g in guards}
    assert len(senders) == 2  # the first owner, then exactly one successor: only owners send
    assert {int(n.split(":")[-2]) for n in senders} >= {victim.pid}
