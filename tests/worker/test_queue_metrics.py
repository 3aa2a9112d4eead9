"""The metrics operators of the peers expect (River, Oban, Sidekiq exporters): attempts by outcome,
enqueue-to-start latency, lease renewals, the queues' depth and oldest due age, in-flight per
type; and their Prometheus names."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from django.db import connection
from django.test import override_settings

from runnerq_django import metrics
from runnerq_django.worker import gauges
from tests.helpers import wait_until
from tests.worker import handlers


class Observations:
    """Keeps each histogram observation by (name, queue); counters go to the in-process totals."""

    def __init__(self) -> None:
        self.durations: dict = defaultdict(list)
        self._lock = threading.Lock()

    def inc(self, name: str, value: float, labels: dict[str, str]) -> None:
        pass

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None:
        with self._lock:
            self.durations[(name, labels.get("queue"))].append(seconds)

    def gauge(self, name: str, value: float, labels: dict[str, str]) -> None:
        pass


@pytest.fixture
def observed():
    previous = metrics.get_sink()
    sink = Observations()
    metrics.set_sink(sink)
    yield sink
    metrics.set_sink(previous)


@override_settings(RUNNERQ={"INLINE_WAIT_SECONDS": 0})
def test_attempts_are_counted_by_outcome(worker, queue_name, observed):
    worker(queues=[queue_name])
    done = [handlers.echo.enqueue(n, queue=queue_name) for n in range(2)]
    failed = handlers.fail_non_retryable.enqueue("x", queue=queue_name)
    exhausted = handlers.always_fails.enqueue("x", queue=queue_name)  # retrying, then dead_letter
    sleeper = handlers.sleeper.enqueue({"seconds": 0.3}, queue=queue_name)  # parks once (inline wait 0)
    assert [h.result(timeout=15) for h in done] == [0, 1]
    assert sleeper.result(timeout=15) == {"attempt": 1}
    wait_until(lambda: exhausted.status() == "dead_letter" and failed.status() == "failed", timeout=15)
    expected = {"completed": 3, "retrying": 1, "failed": 1, "dead_letter": 1, "parked": 1}

    def by_outcome():  # a completion is counted just after its result becomes visible
        return {
            outcome: metrics.count("activity_attempts", queue=queue_name, outcome=outcome)
            for outcome in expected
        }

    wait_until(lambda: by_outcome() == expected, timeout=10, message=f"{expected}")
    assert by_outcome() == expected


def test_enqueue_to_start_is_observed_for_work_due_at_once(worker, queue_name, observed):
    worker(queues=[queue_name])
    assert handlers.echo.enqueue("now", queue=queue_name).result(timeout=15) == "now"
    assert handlers.echo.enqueue("later", queue=queue_name, delay=0.3).result(timeout=15) == "later"
    [waited] = observed.durations[("activity_enqueue_to_start", queue_name)]  # not the delayed one
    assert 0 <= waited < 10


def test_lease_renewals_and_in_flight_per_type(worker, queue_name):
    worker(queues=[queue_name], heartbeat_seconds=0.3, lease_seconds=2)
    handle = handlers.slow.enqueue({"seconds": 1.5}, queue=queue_name)
    wait_until(
        lambda: metrics.gauge_value("activity_in_flight", queue=queue_name, type="t.slow") == 1, timeout=15
    )
    assert handle.result(timeout=15)["slept"] == 1.5
    assert metrics.count("activity_lease_renewed", queue=queue_name) >= 2  # each 0.3 s for 1.5 s
    # Once nothing of the type is held, the gauge reads 0 (not its last value).
    wait_until(
        lambda: metrics.gauge_value("activity_in_flight", queue=queue_name, type="t.slow") == 0, timeout=15
    )


def test_queue_depth_and_oldest_due_age(transactional_db, queue_name):
    handlers.echo.enqueue_many([1, 2], queue=queue_name)
    handlers.echo.enqueue(3, queue=queue_name, delay=3600)
    with connection.cursor() as cursor:  # enqueued 90 s ago
        cursor.execute(
            "UPDATE runnerq_activities SET created_at = now() - interval '90 seconds'"
            " WHERE queue_name = %s AND scheduled_at IS NULL",
            [queue_name],
        )
    gauges.report_queues("default", [queue_name])
    depth = {
        state: metrics.gauge_value("queue_depth", queue=queue_name, state=state)
        for state in ("due", "scheduled", "waiting", "running")
    }
    assert depth == {"due": 2, "scheduled": 1, "waiting": 0, "running": 0}
    age = metrics.gauge_value("queue_oldest_due_age_seconds", queue=queue_name)
    assert age is not None and 89 <= age < 120


def test_the_maintenance_loop_reports_the_depth(worker, queue_name):
    handlers.echo.enqueue(1, queue=queue_name, delay=3600)
    worker(queues=[queue_name])
    wait_until(
        lambda: metrics.gauge_value("queue_depth", queue=queue_name, state="scheduled") == 1, timeout=15
    )


def test_prometheus_names(transactional_db, queue_name):
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    sink = metrics.PrometheusSink(registry)
    sink.gauge("queue_depth", 4, {"queue": queue_name, "state": "due"})
    sink.gauge("queue_oldest_due_age_seconds", 2.5, {"queue": queue_name})
    sink.gauge("activity_in_flight", 1, {"queue": queue_name, "type": "t.echo"})
    sink.inc("activity_attempts", 1, {"queue": queue_name, "outcome": "completed"})
    sink.inc("activity_lease_renewed", 3, {"queue": queue_name})
    sink.observe("activity_enqueue_to_start", 0.02, {"queue": queue_name})
    text = generate_latest(registry).decode()
    for line in (
        f'runnerq_queue_depth{{queue="{queue_name}",state="due"}} 4.0',
        f'runnerq_queue_oldest_due_age_seconds{{queue="{queue_name}"}} 2.5',
        f'runnerq_activity_in_flight{{queue="{queue_name}",type="t.echo"}} 1.0',
        f'runnerq_activity_attempts_total{{outcome="completed",queue="{queue_name}"}} 1.0',
        f'runnerq_activity_lease_renewed_total{{queue="{queue_name}"}} 3.0',
        f'runnerq_activity_enqueue_to_start_seconds_count{{queue="{queue_name}"}} 1.0',
    ):
        assert line in text
    assert "# HELP runnerq_queue_depth Activities of the queue by state" in text


def test_no_queue_reads_without_a_metrics_sink(transactional_db, queue_name):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    handlers.echo.enqueue(1, queue=queue_name)
    previous = metrics.get_sink()
    metrics.set_sink(metrics.NoopSink())
    try:
        with CaptureQueriesContext(connection) as queries:
            gauges.report_queues("default", [queue_name])
    finally:
        metrics.set_sink(previous)
    assert len(queries) == 0
    assert metrics.gauge_value("queue_depth", queue=queue_name, state="due") is None
