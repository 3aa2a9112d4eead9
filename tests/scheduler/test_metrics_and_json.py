"""The scheduler's metrics go through the project's metrics hook (``runnerq_django.metrics.set_sink``),
and its records round-trip through django-redis's JSONSerializer (the alias docs/how-to/periodic-jobs.md
recommends)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from runnerq_django import metrics as hook
from tests.scheduler.conftest import PICKLE_SERIALIZER, T0, iso, job, raw_redis, redis_cache

S = timedelta(seconds=1)
MIN = timedelta(minutes=1)
JSON = "django_redis.serializers.json.JSONSerializer"


class RecordingSink:
    """A sink of the project's metrics hook that remembers what it was sent."""

    def __init__(self):
        self.counters, self.gauges, self.durations = [], [], []

    def inc(self, name, value, labels):
        self.counters.append((name, value, dict(labels)))

    def observe(self, name, seconds, labels):
        self.durations.append((name, seconds, dict(labels)))

    def gauge(self, name, value, labels):
        self.gauges.append((name, value, dict(labels)))


@pytest.fixture
def sink():
    recording = RecordingSink()
    hook.set_sink(recording)
    yield recording
    hook.set_sink(None)


def test_scheduler_metrics_go_through_the_project_sink(env, sink):
    core = env.core([job("a"), job("b")])
    core.tick(T0 + S)
    env.cache.delete(env.key("a"))
    core.tick(T0 + MIN + S)
    ns = env.namespace
    enqueued = [(value, labels) for name, value, labels in sink.counters if name == "periodic_enqueued"]
    assert enqueued == [(1, {"namespace": ns})] * 4  # a and b at 12:00 and at 12:01
    repairs = [(value, labels) for name, value, labels in sink.counters if name == "periodic_repairs"]
    assert repairs == [(1, {"namespace": ns, "reason": "missing"})]  # a's eviction; first records are none
    assert ("periodic_is_owner", 1, {"namespace": ns, "node": core.node}) in sink.gauges
    assert hook.totals()["periodic_repairs"] >= 1  # the hook's own totals count them too


def test_records_round_trip_through_the_json_serializer(env, redis_url):
    env.cache = redis_cache(redis_url, SERIALIZER=JSON)
    core = env.core([job("a"), job("b")])
    first = core.tick(T0 + S)
    assert sorted(first.written) == ["a", "b"]
    raw = raw_redis(env.cache).get(env.cache.make_key(env.key("a")))
    stored = json.loads(raw)  # plain JSON text in Redis, no pickle
    assert stored == env.cache.get(env.key("a"))
    assert (stored["v"], stored["job"], stored["last"], stored["next"]) == (
        1,
        "a",
        "2030-01-07T12:00:00Z",
        "2030-01-07T12:01:00Z",
    )
    # A fresh process reads them back as valid records: no repair, progress kept.
    again = env.core([job("a"), job("b")], fencing=False).tick(T0 + MIN + S)
    assert again.repairs == [] and again.enqueued == {"a": [T0 + MIN], "b": [T0 + MIN]}

    # A value the JSON serializer can't read (a pickle left by another serializer) is that key's
    # problem only: repaired as unreadable, the batch still read.
    pickled = redis_cache(redis_url, SERIALIZER=PICKLE_SERIALIZER)
    pickled.set(env.key("b"), env.cache.get(env.key("b")))
    report = core.tick(T0 + 2 * MIN + S)
    assert report.repairs == [("b", "unreadable", "db_evidence")]
    assert (
        json.loads(raw_redis(env.cache).get(env.cache.make_key(env.key("b"))))["next"]
        == "2030-01-07T12:03:00Z"
    )
    assert iso(env.occurrences("b")) == [
        "2030-01-07T12:00:00Z",
        "2030-01-07T12:01:00Z",
        "2030-01-07T12:02:00Z",
    ]


def test_with_the_default_prometheus_sink_the_scheduler_exports_its_counters_and_gauges(env):
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    hook.set_sink(hook.PrometheusSink(registry=registry))
    try:
        core = env.core([job("a")])
        core.tick(T0 + S)
        env.cache.delete(env.key("a"))
        core.tick(T0 + MIN + S)
    finally:
        hook.set_sink(None)
    text = prometheus_client.generate_latest(registry).decode()
    ns = env.namespace
    assert f'runnerq_periodic_repairs_total{{namespace="{ns}",reason="missing"}} 1.0' in text
    assert f'runnerq_periodic_enqueued_total{{namespace="{ns}"}} 2.0' in text
    assert f'runnerq_periodic_is_owner{{namespace="{ns}",node="{core.node}"}} 1.0' in text
