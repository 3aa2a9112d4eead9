"""The scheduler's metrics, sent through the project's metrics hook (``runnerq_django.metrics``:
``set_sink()``; Prometheus by default, as ``runnerq_periodic_<name>_total``), like the worker's.

Counters are ``periodic_<name>`` with labels (``namespace``, and ``reason``/``op`` where they
apply). The two gauges (``periodic_is_owner``, ``periodic_cache_degraded``) go to a sink that has a
``gauge(name, value, labels)`` method, and to a Prometheus gauge in the default sink's registry.
The process also keeps its own labelled totals (``count()``, ``gauge_value()``) for summaries and
tests. Durable repair counts live in Postgres (``runnerq_periodic_repairs``).
"""

from __future__ import annotations

import threading
from collections import Counter

from runnerq_django import metrics as hook

PREFIX = "periodic_"

_lock = threading.Lock()
_counters: Counter = Counter()
_gauges: dict = {}
_prometheus_gauges: dict = {}

HELP = {
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


def inc(name: str, amount: int = 1, **labels) -> None:
    if not amount:
        return
    with _lock:
        _counters[(name, _labels(labels))] += amount
    hook.inc(PREFIX + name, amount, **{k: str(v) for k, v in labels.items()})


def gauge(name: str, value: float, **labels) -> None:
    with _lock:
        _gauges[(name, _labels(labels))] = value
    labels = {k: str(v) for k, v in labels.items()}
    try:
        sink = hook.get_sink()
        setter = getattr(sink, "gauge", None)
        if callable(setter):
            setter(PREFIX + name, value, labels)
        elif isinstance(sink, hook.PrometheusSink):
            _prometheus_gauge(sink, name, tuple(sorted(labels))).labels(**labels).set(value)
    except Exception:  # metrics never break the work they count
        hook.logger.debug("runnerq.metrics.failed", exc_info=True)


def _prometheus_gauge(sink, name: str, labelnames: tuple):
    import prometheus_client

    registry = getattr(sink, "_registry", None) or prometheus_client.REGISTRY
    key = (id(registry), name)
    with _lock:
        metric = _prometheus_gauges.get(key)
        if metric is None:
            metric = prometheus_client.Gauge(f"runnerq_{PREFIX}{name}", HELP.get(name, name), labelnames,
                                             registry=registry)
            _prometheus_gauges[key] = metric
    return metric


def count(name: str, **labels) -> int:
    """The sum of a counter over every label set that includes ``labels``."""
    wanted = set(labels.items())
    with _lock:
        return sum(v for (n, ls), v in _counters.items() if n == name and wanted <= set(ls))


def gauge_value(name: str, **labels):
    with _lock:
        return _gauges.get((name, _labels(labels)))
