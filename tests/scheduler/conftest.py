"""Fixtures of the scheduler tests: real Postgres (transactional: ticks commit), real Redis."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from runnerq_django.scheduler import declarations, records, service
from runnerq_django.scheduler.schedules import format_instant

UTC = timezone.utc
T0 = datetime(2030, 1, 7, 12, 0, tzinfo=UTC)  # a Monday noon, far from any DST change
ACTIVITY = "tests.scheduler.Tick"


def job(id: str, **options) -> declarations.PeriodicJob:
    options.setdefault("activity", ACTIVITY)
    if "cron" not in options and "every" not in options:
        options["every"] = timedelta(minutes=1)
    return declarations.make_job(id, origin="test", **options)


def redis_cache(url: str, **options):
    """A django-redis cache on ``url`` (IGNORE_EXCEPTIONS off unless asked), built like an alias."""
    from django_redis.cache import RedisCache

    opts = {"CLIENT_CLASS": "django_redis.client.DefaultClient",
            "SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5, **options}
    return RedisCache(url, {"OPTIONS": opts})


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
        cursor.execute("SELECT occurrence FROM runnerq_periodic_occurrences WHERE namespace = %s AND job_id = %s "
                       "ORDER BY occurrence", [namespace, job_id])
        return [row[0] for row in cursor.fetchall()]


def iso(values) -> list[str]:
    return [format_instant(v) for v in values]


class Env:
    """One test's scheduler world: a namespace, a cache, and cores built against them."""

    def __init__(self, namespace: str, cache):
        self.namespace = namespace
        self.cache = cache

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
def env(transactional_db, namespace, shared_cache):
    world = Env(namespace, shared_cache)
    yield world
    client = raw_redis(shared_cache)
    for key in client.scan_iter(match=f"*periodic:v1:{namespace}:*"):
        client.delete(key)


@pytest.fixture
def private_env(transactional_db, namespace, private_redis):
    return Env(namespace, redis_cache(private_redis["url"]))


@pytest.fixture
def scheduler_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="runnerq_django.scheduler")
    return caplog


def events(caplog, event: str, level: int | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event and (level is None or r.levelno == level)]
