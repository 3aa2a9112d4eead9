"""What the worker and the client report to the metrics hook (a sink of the test's own, installed
with the public ``metrics.set_sink``), and the log lines operators correlate on."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

import pytest

from runnerq_django import metrics
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
