"""A small metrics hook: counters and durations named like the Go SDK's (``activity_started``,
``activity_completed``, ``activity_retry`` ...), sent to a sink.

The default sink is Prometheus when ``prometheus-client`` is installed (metrics
``runnerq_<name>_total`` and ``runnerq_<name>_seconds``, labelled by queue; ``runworker
--metrics-port`` serves them), otherwise nothing. Install your own with :func:`set_sink` (StatsD,
OpenTelemetry ...). Totals are also kept in-process for the worker's final summary.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Protocol

__all__ = [
    "COUNTERS",
    "DURATIONS",
    "MetricsSink",
    "NoopSink",
    "PrometheusSink",
    "get_sink",
    "set_sink",
]

logger = logging.getLogger("runnerq_django.metrics")

# name -> help text. Counters unless the name is in DURATIONS.
COUNTERS = {
    "activity_enqueued": "Activities created by this process (enqueue, enqueue_many, spawn; not a duplicate key).",
    "activity_started": "Activities claimed whose handler started here.",
    "activity_completed": "Activities completed successfully.",
    "activity_retry": "Failed attempts scheduled for a retry.",
    "activity_failed_non_retry": "Activities failed permanently (non-retryable error).",
    "activity_timeout": "Attempts that exceeded the activity timeout.",
    "activity_dead_lettered": "Activities that ran out of attempts.",
    "activity_handler_not_found": "Claimed activities with no handler registered here.",
    "activity_claim_lost": "Attempts that lost their claim (lease expired, cancelled, released).",
    "activity_heartbeat_failed": "Lease renewal rounds that failed and will be retried.",
    "activity_yielded": "Activities parked for a durable wait (sleep, signal, child).",
    "activity_released": "Claims handed back at shutdown without counting an attempt.",
    "activity_requeued": "Expired leases requeued or dead-lettered by the reaper.",
    "activity_trees_swept": "Finished workflow trees deleted by retention.",
    "storage_retry": "Worker storage calls that failed transiently and were retried.",
}
DURATIONS = {
    "activity_execution": "Handler run time, per attempt.",
    "activity_claim_lag": "From an activity being due to its claim (the database clock).",
    "activity_completion_persistence": "Time to record a batch of completions.",
    "dequeue_roundtrip": "Time of one claim round trip.",
}


class MetricsSink(Protocol):
    def inc(self, name: str, value: float, labels: dict[str, str]) -> None: ...

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None: ...


class NoopSink:
    def inc(self, name: str, value: float, labels: dict[str, str]) -> None:
        pass

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None:
        pass


class PrometheusSink:
    """Counters ``runnerq_<name>_total`` and histograms ``runnerq_<name>_seconds``."""

    def __init__(self, registry=None):
        import prometheus_client

        self._prometheus = prometheus_client
        self._registry = registry or prometheus_client.REGISTRY
        self._metrics: dict[str, object] = {}
        self._lock = threading.Lock()

    def _metric(self, name: str, labels: dict[str, str], histogram: bool):
        metric = self._metrics.get(name)
        if metric is None:
            with self._lock:
                metric = self._metrics.get(name)
                if metric is None:
                    cls = self._prometheus.Histogram if histogram else self._prometheus.Counter
                    full = f"runnerq_{name}_seconds" if histogram else f"runnerq_{name}"
                    doc = (DURATIONS if histogram else COUNTERS).get(name, name)
                    metric = cls(full, doc, labelnames=sorted(labels), registry=self._registry)
                    self._metrics[name] = metric
        return metric.labels(**labels) if labels else metric

    def inc(self, name: str, value: float, labels: dict[str, str]) -> None:
        self._metric(name, labels, histogram=False).inc(value)

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None:
        self._metric(name, labels, histogram=True).observe(seconds)


_sink: MetricsSink | None = None
_sink_lock = threading.Lock()
_totals: Counter[str] = Counter()
_totals_lock = threading.Lock()


def _default_sink() -> MetricsSink:
    try:
        return PrometheusSink()
    except ImportError:
        return NoopSink()


def set_sink(sink: MetricsSink | None) -> None:
    """Send metrics to ``sink`` (``None``: back to the default)."""
    global _sink
    with _sink_lock:
        _sink = sink


def get_sink() -> MetricsSink:
    global _sink
    if _sink is None:
        with _sink_lock:
            if _sink is None:
                _sink = _default_sink()
    return _sink


def inc(name: str, value: float = 1, **labels: str) -> None:
    if not value:
        return
    with _totals_lock:
        _totals[name] += value
    try:
        get_sink().inc(name, value, labels)
    except Exception:  # metrics never break the work they count
        logger.debug("runnerq.metrics.failed", exc_info=True)


def observe(name: str, seconds: float, **labels: str) -> None:
    try:
        get_sink().observe(name, seconds, labels)
    except Exception:
        logger.debug("runnerq.metrics.failed", exc_info=True)


def totals() -> dict[str, float]:
    """Counter totals since the process started (all queues), for summaries and tests."""
    with _totals_lock:
        return dict(_totals)


def serve(port: int, addr: str = "0.0.0.0") -> bool:
    """Serve ``/metrics`` for Prometheus on ``port``; False when prometheus-client is missing."""
    try:
        import prometheus_client
    except ImportError:
        return False
    prometheus_client.start_http_server(port, addr=addr)
    return True
