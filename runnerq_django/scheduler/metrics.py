"""Process-local counters and gauges of the scheduler (and Prometheus ones when
``prometheus_client`` is installed). Durable repair counts live in Postgres
(``runnerq_periodic_repairs``); these are for dashboards and tests."""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counters: Counter = Counter()
_gauges: dict = {}
_prom: dict = {}

_HELP = {
    "repairs": "Cache records rebuilt at the point of use, by reason",
    "enqueued": "Occurrences this process enqueued",
    "already_enqueued": "Occurrences another scheduler had already enqueued (duplicate pressure)",
    "misfires": "Occurrences dropped because they were older than the misfire grace",
    "catch_up_overflow": "Occurrences deferred by the per-tick catch-up cap",
    "clock_jumps": "Wall-clock steps between ticks beyond the monotonic clock",
    "cache_errors": "Failed cache operations (reads or writes)",
    "fenced": "Enqueues refused because the lease had moved",
    "enqueue_failures": "Enqueues or sends that failed for a reason other than the database (retried with back-off)",
    "touches": "Record TTL refreshes",
    "is_owner": "1 when this process owns the scheduler namespace",
    "cache_degraded": "1 while the scheduler's cache is unreachable (degraded mode)",
}


def _labels(labels: dict) -> tuple:
    return tuple(sorted(labels.items()))


def _prometheus(name: str, kind: str, labelnames: tuple):
    key = (name, kind)
    if key in _prom:
        return _prom[key]
    try:
        import prometheus_client
    except ImportError:
        _prom[key] = None
        return None
    cls = prometheus_client.Counter if kind == "counter" else prometheus_client.Gauge
    try:
        metric = cls(f"runnerq_periodic_{name}", _HELP.get(name, name), labelnames)
    except ValueError:  # already registered (e.g. module reloaded)
        metric = None
    _prom[key] = metric
    return metric


def inc(name: str, amount: int = 1, **labels) -> None:
    with _lock:
        _counters[(name, _labels(labels))] += amount
        metric = _prometheus(name, "counter", tuple(sorted(labels)))
    if metric is not None and amount:
        (metric.labels(**labels) if labels else metric).inc(amount)


def gauge(name: str, value: float, **labels) -> None:
    with _lock:
        _gauges[(name, _labels(labels))] = value
        metric = _prometheus(name, "gauge", tuple(sorted(labels)))
    if metric is not None:
        (metric.labels(**labels) if labels else metric).set(value)


def count(name: str, **labels) -> int:
    """The sum of a counter over every label set that includes ``labels``."""
    wanted = set(labels.items())
    with _lock:
        return sum(v for (n, ls), v in _counters.items() if n == name and wanted <= set(ls))


def gauge_value(name: str, **labels):
    with _lock:
        return _gauges.get((name, _labels(labels)))
