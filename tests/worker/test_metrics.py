"""What the worker and the client report to the metrics hook (a sink of the test's own, installed
with the public ``metrics.set_sink``), and the log lines operators correlate on."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict

import pytest

from runnerq_django import metrics
from runnerq_django.logs import event_of
from tests.worker import handlers


class RecordingSink:
    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.durations: dict = defaultdict(list)
        self._lock = threading.Lock()

    def inc(self, name: str, value: float, labels: dict[str, str]) -> None:
        with self._lock:
            self.counts[(name, labels.get("queue"))] += value

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None:
        with self._lock:
            self.durations[(name, labels.get("queue"))].append(seconds)


@pytest.fixture
def sink():
    previous = metrics.get_sink()
    recording = RecordingSink()
    metrics.set_sink(recording)
    yield recording
    metrics.set_sink(previous)


def test_activity_enqueued_counts_created_activities_spawns_included(worker, sink):
    worker()
    handlers.echo.enqueue(1, idempotency_key="once")
    assert handlers.echo.enqueue(1, idempotency_key="once").created is False  # a duplicate enqueues nothing
    handlers.echo.enqueue_many([1, 2, 3])
    assert handlers.parent.enqueue({"children": 2}).result(timeout=15)["results"] == [{"n": 0}, {"n": 1}]
    assert sink.counts[("activity_enqueued", "default")] == 1 + 3 + 1 + 2  # the parent's two children too


def test_claim_lag_is_the_time_from_due_to_claim(worker, sink):
    early = handlers.echo.enqueue_many([1, 2, 3])
    time.sleep(0.6)  # due now, but no worker yet
    instance = worker()
    assert [h.result(timeout=15) for h in early] == [1, 2, 3]
    lags = sink.durations[("activity_claim_lag", "default")]
    assert len(lags) == 3 and all(0.6 <= lag < 10 for lag in lags)
    delayed = handlers.echo.enqueue("later", delay=0.5)  # due in 0.5 s: the lag counts from then
    assert delayed.result(timeout=15) == "later"
    assert (
        0
        <= sink.durations[("activity_claim_lag", "default")][-1]
        < 0.5 + instance.options.poll_interval_seconds
    )


def test_the_reaper_names_what_it_reaped(worker, queue_name, caplog):
    from runnerq_django import storage

    handles = handlers.echo.enqueue_many(list(range(3)), queue=queue_name)
    assert len(storage.claim(queue_name, limit=3, lease_ms=1, worker_id="dead-worker")) == 3
    with caplog.at_level(logging.INFO, logger="runnerq_django.worker"):
        worker(queues=[queue_name])
        assert [h.result(timeout=15) for h in handles] == [0, 1, 2]  # reaped, then run
    [line] = [r for r in caplog.records if event_of(r) == "runnerq.reaper.requeued"]
    assert line.count == 3 and line.queue == queue_name
    assert sorted(line.activity_ids.split(",")) == sorted(str(h.id) for h in handles)


def test_the_prometheus_sink_observes_a_batch_under_one_labelled_histogram():
    """The dispatcher reports a claim's lags as one batch (``observe_many``); the sink looks the
    labelled child up once per labels, not per observation."""
    import prometheus_client

    registry = prometheus_client.CollectorRegistry()
    sink = metrics.PrometheusSink(registry)
    previous = metrics.get_sink()
    metrics.set_sink(sink)
    try:
        metrics.observe_many("activity_claim_lag", [0.001, 0.5, 3.0], queue="q1")
        metrics.observe_many("activity_claim_lag", [], queue="q1")  # nothing to report
        metrics.observe("activity_claim_lag", 0.2, queue="q1")
        metrics.observe_many("activity_claim_lag", [0.1], queue="q2")
    finally:
        metrics.set_sink(previous)
    count = registry.get_sample_value
    assert count("runnerq_activity_claim_lag_seconds_count", {"queue": "q1"}) == 4
    assert count("runnerq_activity_claim_lag_seconds_sum", {"queue": "q1"}) == pytest.approx(3.701)
    assert count("runnerq_activity_claim_lag_seconds_count", {"queue": "q2"}) == 1
    assert sink._histogram("activity_claim_lag", {"queue": "q1"}) is sink._histogram(
        "activity_claim_lag", {"queue": "q1"}
    )


def test_a_batch_observed_at_once_counts_as_each_observed_alone():
    """observe_many adds a batch to each bucket once (each increment takes prometheus-client's
    lock): every bucket, the count and the sum are what observing each value alone gives, NaN
    (counted in no bucket) and the edges of the buckets included."""
    import math

    import prometheus_client

    values = [0.0, 0.001, 0.005, 0.0051, 0.5, 0.5, 3.0, 1e9, math.nan, 0.25]
    batched, alone = prometheus_client.CollectorRegistry(), prometheus_client.CollectorRegistry()
    metrics.histogram("activity_execution", queue="q")._bind(metrics.PrometheusSink(batched))[1](values)
    plain = metrics.PrometheusSink(alone)._histogram("activity_execution", {"queue": "q"})
    for value in values:
        plain.observe(value)

    def samples(registry):
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in registry.collect()
            for sample in family.samples
            if not sample.name.endswith("_created")
        }

    got, expected = samples(batched), samples(alone)
    assert got.keys() == expected.keys() and len(got) > 5
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, nan_ok=True), key
