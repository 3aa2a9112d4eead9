"""Fixtures of the scheduler tests: real Postgres (transactional: ticks commit), real Redis."""

from __future__ import annotations

import logging
import subprocess
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from runnerq_django.logs import event_of
from runnerq_django.scheduler import declarations, records, service
from runnerq_django.scheduler.schedules import format_instant

UTC = UTC
T0 = datetime(2030, 1, 7, 12, 0, tzinfo=UTC)  # a Monday noon, far from any DST change
ACTIVITY = "tests.scheduler.Tick"


def job(id: str, **options) -> declarations.PeriodicJob:
    options.setdefault("activity", ACTIVITY)
    if "cron" not in options and "every" not in options:
        options["every"] = timedelta(minutes=1)
    return declarations.make_job(id, origin="test", **options)


JSON_SERIALIZER = "django_redis.serializers.json.JSONSerializer"
PICKLE_SERIALIZER = "django_redis.serializers.pickle.PickleSerializer"  # django-redis's default


def redis_cache(url: str, key_prefix: str = "", **options):
    """A django-redis cache on ``url`` built like the alias of docs/how-to/periodic-jobs.md
    (JSONSerializer, so a test's ``cache.get`` reads the scheduler's JSON text; IGNORE_EXCEPTIONS
    off unless asked)."""
    from django_redis.cache import RedisCache

    opts = {
        "CLIENT_CLASS": "django_redis.client.DefaultClient",
        "SERIALIZER": JSON_SERIALIZER,
        "SOCKET_CONNECT_TIMEOUT": 0.5,
        "SOCKET_TIMEOUT": 0.5,
        **options,
    }
    return RedisCache(url, {"OPTIONS": opts, "KEY_PREFIX": key_prefix})


def raw_redis(cache):
    return cache.client.get_client(write=True)


def occurrences(namespace: str, job_id: str) -> list[datetime]:
    """Occurrences with an activity, one entry per activity (duplicates would repeat)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT metadata->>'periodic_occurrence' FROM runnerq_activities "
            "WHERE metadata->>'periodic_namespace' = %s AND metadata->>'periodic_job' = %s ORDER BY 1",
            [namespace, job_id],
        )
        return [records.parse_instant(row[0]) for row in cursor.fetchall()]


def guard_rows(namespace: str, job_id: str) -> list[datetime]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT occurrence FROM runnerq_periodic_occurrences WHERE namespace = %s AND job_id = %s "
            "ORDER BY occurrence",
            [namespace, job_id],
        )
        return [row[0] for row in cursor.fetchall()]


def iso(values) -> list[str]:
    return [format_instant(v) for v in values]


class Env:
    """One test's scheduler world: a namespace, a cache, and cores built against them (in this
    process with ``core``, or in processes of their own with ``config`` and ``remote_schedulers``)."""

    def __init__(self, namespace: str, cache, url: str | None = None):
        self.namespace = namespace
        self.cache = cache
        self.url = url

    def config(self, jobs: list[dict], **options) -> dict:
        """A scheduler process's configuration (tests.scheduler.proc) in this world."""
        return {
            "namespace": self.namespace,
            "cache_url": self.url,
            "jobs": jobs,
            "lease_seconds": 30,
            "max_interval": 5,
            **options,
        }

    def core(self, jobs, **options):
        options.setdefault("lease_seconds", 30)
        options.setdefault("max_interval", 5)
        return service.build_core(jobs, namespace=self.namespace, cache=self.cache, **options)

    def key(self, job_id: str) -> str:
        return records.key_for(self.namespace, f"job:{job_id}")

    def record(self, job_id: str):
        return self.cache.get(self.key(job_id))

    def occurrences(self, job_id: str):
        return occurrences(self.namespace, job_id)


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def shared_cache(redis_url):
    return redis_cache(redis_url)


@pytest.fixture
def env(transactional_db, namespace, shared_cache, redis_url):
    world = Env(namespace, shared_cache, redis_url)
    yield world
    client = raw_redis(shared_cache)
    for key in client.scan_iter(match=f"*periodic:v1:{namespace}:*"):
        client.delete(key)


@pytest.fixture
def private_env(transactional_db, namespace, private_redis):
    return Env(namespace, redis_cache(private_redis["url"]), private_redis["url"])


@pytest.fixture
def remote_schedulers(live_db_url):
    """``launch(config, ...)``: scheduler processes driven step by step (``remote.Remote``), each
    with its own database session and memory; all are stopped before the test database is."""
    from tests.scheduler import remote

    started = []

    def launch(*configs):
        remotes = remote.start(list(configs), live_db_url)
        started.extend(remotes)
        return remotes

    yield launch
    for proc in started:
        proc.stop()


@pytest.fixture
def scheduler_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="runnerq_django.scheduler")
    return caplog


def events(caplog, event: str, level: int | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records if event_of(r) == event and (level is None or r.levelno == level)]


def start_redis(private_redis) -> subprocess.Popen:
    """(Re)start a redis-server on the private server's port (a fresh, empty server)."""
    from tests.helpers import start_redis_server

    return start_redis_server(private_redis["binary"], private_redis["port"], private_redis["dir"])


def stop_redis(proc) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture
def restartable_redis(private_redis):
    """The private redis plus a way to stop and restart it; every server started is stopped."""
    started = []

    class Control:
        url = private_redis["url"]

        def stop(self):
            stop_redis(started[-1] if started else private_redis["process"])

        def start(self):
            started.append(start_redis(private_redis))

    yield Control()
    for proc in started:
        stop_redis(proc)


def process_env(db_url: str, **settings) -> dict:
    """Environment of a scheduler process: the test database and tests.scheduler.settings, which
    reads RUNNERQ['SCHEDULER'] overrides (namespace, jobs, lease...) from RQ_SCHEDULER_JSON."""
    import json

    from tests.helpers import manage_env

    env = manage_env(
        db_url,
        DJANGO_SETTINGS_MODULE="tests.scheduler.settings",
        RQ_SCHEDULER_JSON=json.dumps(settings.pop("scheduler", {})),
    )
    env.update({k: str(v) for k, v in settings.items()})
    return env
