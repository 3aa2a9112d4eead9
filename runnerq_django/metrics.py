"""A small metrics hook for the worker and the scheduler: counters and durations named like the Go
SDK's (``activity_started``, ``activity_completed``, ``activity_retry`` ...), the scheduler's
``periodic_*`` counters and gauges, sent to a sink.

The default sink is Prometheus when ``prometheus-client`` is installed (metrics
``runnerq_<name>_total``, ``runnerq_<name>_seconds`` and gauges ``runnerq_<name>``, labelled by
queue or namespace; ``runworker --metrics-port`` serves them), otherwise nothing. Install your own
with :func:`set_sink` (StatsD, OpenTelemetry ...); gauges go to a sink that has a
``gauge(name, value, labels)`` method. Labelled totals are also kept in-process for the worker's
final summary and for tests (``totals()``, ``count()``, ``gauge_value()``). Durable repair counts
live in Postgres (``runnerq_periodic_repairs``).
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from runnerq_django.logs import log_event

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Histogram
    from prometheus_client.metrics import MetricWrapperBase

    _Metric = TypeVar("_Metric", bound=MetricWrapperBase)

__all__ = [
    "COUNTERS",
    "DURATIONS",
    "GAUGES",
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
    "activity_attempts": "Attempts by outcome: completed, retrying, failed, dead_letter, parked, claim_lost.",
    "activity_lease_renewed": "Leases renewed by the heartbeat (one per held activity and round).",
    "activity_trees_swept": "Finished workflow trees deleted by retention.",
    "storage_retry": "Worker storage calls that failed transiently and were retried.",
    "periodic_repairs": "Cache records rebuilt at the point of use, by reason",
    "periodic_enqueued": "Occurrences this process enqueued",
    "periodic_already_enqueued": "Occurrences another scheduler had already enqueued (duplicate pressure)",
    "periodic_misfires": "Occurrences dropped because they were older than the misfire grace",
    "periodic_catch_up_overflow": "Occurrences deferred by the per-tick catch-up cap",
    "periodic_clock_jumps": "Wall-clock steps between ticks beyond the monotonic clock",
    "periodic_cache_errors": "Failed cache operations (reads or writes)",
    "periodic_fenced": "Enqueues refused because the lease had moved",
    "periodic_enqueue_failures": "Enqueues or sends that failed for a reason other than the database (retried with back-off)",
    "periodic_touches": "Record TTL refreshes",
}
DURATIONS = {
    "activity_execution": "Handler run time, per attempt.",
    "activity_claim_lag": "From an activity being due to its claim (the database clock).",
    "activity_enqueue_to_start": "From enqueue to the first attempt's start, for activities due at once (the database clock).",
    "activity_completion_persistence": "Time to record a batch of completions.",
    "dequeue_roundtrip": "Time of one claim round trip.",
}
GAUGES = {
    "queue_depth": "Activities of the queue by state: due, scheduled (not due yet), waiting (parked), running; capped at 100000",
    "queue_oldest_due_age_seconds": "Seconds since the oldest due runnable activity of the queue became due (0: none due)",
    "xmin_horizon_age_seconds": "Seconds the oldest transaction holding back the database's xmin horizon (what vacuum may remove) has been open; 0: none. Per database alias",
    "xmin_horizon_age_xids": "Transactions the database's xmin horizon is behind (sessions, replication slots, prepared transactions); per database alias",
    "activity_in_flight": "Attempts this worker holds (claimed or running), per queue and type",
    "periodic_is_owner": "1 when this process owns the scheduler namespace",
    "periodic_cache_degraded": "1 while the scheduler's cache is unreachable (degraded mode)",
}


class MetricsSink(Protocol):
    def inc(self, name: str, value: float, labels: dict[str, str]) -> None: ...

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None: ...


class NoopSink:
    def inc(self, name: str, value: float, labels: dict[str, str]) -> None:
        pass

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None:
        pass

    def gauge(self, name: str, value: float, labels: dict[str, str]) -> None:
        pass


class PrometheusSink:
    """Counters ``runnerq_<name>_total``, histograms ``runnerq_<name>_seconds`` and gauges
    ``runnerq_<name>``."""

    def __init__(self, registry: CollectorRegistry | None = None):
        import prometheus_client

        self._prometheus = prometheus_client
        self._registry = registry or prometheus_client.REGISTRY
        self._metrics: dict[str, MetricWrapperBase] = {}
        # (name, labels as given) -> the labelled child: prometheus_client's labels() costs more
        # than the observation itself, and the worker observes per activity.
        self._children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()

    def _child(
        self, name: str, labels: dict[str, str], cls: type[_Metric], full: str, docs: Mapping[str, str]
    ) -> _Metric:
        key = (full, *(item for pair in labels.items() for item in pair))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._metric(name, labels, cls, full, docs)
        return cast("_Metric", child)

    def _metric(
        self, name: str, labels: dict[str, str], cls: type[_Metric], full: str, docs: Mapping[str, str]
    ) -> _Metric:
        metric = self._metrics.get(name)
        if metric is None:
            with self._lock:
                metric = self._metrics.get(name)
                if metric is None:
                    metric = cls(
                        full, docs.get(name, name), labelnames=sorted(labels), registry=self._registry
                    )
                    self._metrics[name] = metric
        # A name is always sent as the same kind, so the metric made for it is a ``cls``.
        metric = cast("_Metric", metric)
        return metric.labels(**labels) if labels else metric

    def inc(self, name: str, value: float, labels: dict[str, str]) -> None:
        self._counter(name, labels).inc(value)

    def _counter(self, name: str, labels: dict[str, str]) -> Any:
        return self._child(name, labels, self._prometheus.Counter, f"runnerq_{name}", COUNTERS)

    def observe(self, name: str, seconds: float, labels: dict[str, str]) -> None:
        self._histogram(name, labels).observe(seconds)

    def observe_many(self, name: str, values: list[float], labels: dict[str, str]) -> None:
        observe = self._histogram(name, labels).observe
        for seconds in values:
            observe(seconds)

    def _histogram(self, name: str, labels: dict[str, str]) -> Histogram:
        histogram = self._prometheus.Histogram
        return self._child(name, labels, histogram, f"runnerq_{name}_seconds", DURATIONS)

    def gauge(self, name: str, value: float, labels: dict[str, str]) -> None:
        self._child(name, labels, self._prometheus.Gauge, f"runnerq_{name}", GAUGES).set(value)


_sink: MetricsSink | None = None
_sink_lock = threading.Lock()
# (name, sorted labels) -> total / last value, for summaries and tests.
_Key = tuple[str, tuple[tuple[str, str], ...]]
_totals: dict[_Key, float] = {}
_gauges: dict[_Key, float] = {}
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


def _key(name: str, labels: dict[str, str]) -> _Key:
    return name, tuple(sorted(labels.items()))


def _noop(value: float) -> None:
    pass


def _noop_many(values: list[float]) -> None:
    pass


class BoundCounter:
    """One counter with its labels bound (:func:`counter`): ``inc`` without building the labels,
    their sorted key or the sink's labelled child each time (the worker counts per activity).
    The same totals and sink calls as :func:`inc`; a sink installed later is picked up."""

    __slots__ = ("_bound", "key", "labels", "name")

    def __init__(self, name: str, labels: dict[str, str]):
        self.name = name
        self.labels = labels
        self.key = _key(name, labels)
        self._bound: tuple[object, Callable[[float], None]] = (None, _noop)  # (sink, its inc)

    def inc(self, value: float = 1) -> None:
        if not value:
            return
        key = self.key
        with _totals_lock:
            _totals[key] = _totals.get(key, 0) + value
        try:
            sink = _sink if _sink is not None else get_sink()
            bound = self._bound
            if bound[0] is not sink:
                bound = self._bound = (sink, self._bind(sink))
            bound[1](value)
        except Exception:  # metrics never break the work they count
            _hook_failed()

    def _bind(self, sink: MetricsSink) -> Callable[[float], None]:
        if type(sink) is NoopSink:
            return _noop
        if type(sink) is PrometheusSink:  # not a subclass: it may count its own way
            return _fast_inc(sink._counter(self.name, self.labels))
        name, labels = self.name, self.labels
        return lambda value: sink.inc(name, value, dict(labels))  # a dict of its own each call


class BoundHistogram:
    """One duration with its labels bound (:func:`histogram`): ``observe`` and ``observe_many``
    without looking the sink's labelled histogram up each time."""

    __slots__ = ("_bound", "labels", "name")

    def __init__(self, name: str, labels: dict[str, str]):
        self.name = name
        self.labels = labels
        # (sink, its observe, its observe_many)
        self._bound: tuple[object, Callable[[float], None], Callable[[list[float]], None]] = (
            None,
            _noop,
            _noop_many,
        )

    def _observers(self) -> tuple[object, Callable[[float], None], Callable[[list[float]], None]]:
        sink = _sink if _sink is not None else get_sink()
        bound = self._bound
        if bound[0] is not sink:
            bound = self._bound = (sink, *self._bind(sink))
        return bound

    def observe(self, seconds: float) -> None:
        try:
            self._observers()[1](seconds)
        except Exception:
            _hook_failed()

    def observe_many(self, values: list[float]) -> None:
        if not values:
            return
        try:
            self._observers()[2](values)
        except Exception:
            _hook_failed()

    def _bind(self, sink: MetricsSink) -> tuple[Callable[[float], None], Callable[[list[float]], None]]:
        if type(sink) is NoopSink:
            return _noop, _noop_many
        if type(sink) is PrometheusSink:
            return _fast_observers(sink._histogram(self.name, self.labels))
        name, labels = self.name, self.labels

        def observe(seconds: float) -> None:
            sink.observe(name, seconds, dict(labels))  # a dict of its own each call

        many = getattr(sink, "observe_many", None)
        if callable(many):
            return observe, lambda values: many(name, values, dict(labels))

        def observe_each(values: list[float]) -> None:
            for seconds in values:
                observe(seconds)

        return observe, observe_each


def _fast_inc(counter: Any) -> Callable[[float], None]:
    """``counter.inc`` without its per-call checks: its value's own (locked) increment, for
    amounts that are not negative; the public ``inc`` (which refuses them) otherwise."""
    public: Callable[[float], None] = counter.inc
    add = getattr(getattr(counter, "_value", None), "inc", None)
    if not callable(add):
        return public

    def inc(value: float) -> None:
        if value >= 0:
            add(value)
        else:
            public(value)

    return inc


def _fast_observers(histogram: Histogram) -> tuple[Callable[[float], None], Callable[[list[float]], None]]:
    """``histogram.observe`` without its per-call checks and bucket loop: the sum and the first
    bucket whose bound is at least the value (bisect over the sorted bounds, the last infinite),
    the same two increments; and its ``observe_many``, which adds a batch's values to the sum
    once and counts them into each bucket once (each increment takes a lock: the claim lag of a
    claim of 32 was 64 of them). prometheus-client's public ``observe`` when its internals are
    not the expected ones, and for NaN (which it counts in no bucket)."""
    public = histogram.observe

    def each(values: list[float]) -> None:
        for seconds in values:
            public(seconds)

    try:
        bounds = list(histogram._upper_bounds)
        buckets = [bucket.inc for bucket in histogram._buckets]
        add_to_sum = histogram._sum.inc
    except AttributeError:
        return public, each
    if len(bounds) != len(buckets) or not bounds or bounds != sorted(bounds) or bounds[-1] != float("inf"):
        return public, each

    def observe(seconds: float) -> None:
        if seconds != seconds:  # NaN
            public(seconds)
            return
        add_to_sum(seconds)
        buckets[bisect_left(bounds, seconds)](1)

    def observe_many(values: list[float]) -> None:
        counts: dict[int, int] = {}
        total = 0.0
        for seconds in values:
            if seconds != seconds:  # NaN
                public(seconds)
                continue
            index = bisect_left(bounds, seconds)
            counts[index] = counts.get(index, 0) + 1
            total += seconds
        if counts:
            add_to_sum(total)
            for index, count in counts.items():
                buckets[index](count)

    return observe, observe_many


# (name, label items as given) -> its bound metric, for labels that are all text (other values
# are converted with str(), and 1 == True would share a key).
_counters: dict[tuple[object, ...], BoundCounter] = {}
_histograms: dict[tuple[object, ...], BoundHistogram] = {}


def counter(name: str, **labels: object) -> BoundCounter:
    """The counter ``name`` with ``labels`` bound: ``counter(name, **labels).inc(value)`` is
    ``inc(name, value, **labels)``; keep it to count often."""
    texts = {key: str(label) for key, label in labels.items()}
    cacheable = all(type(label) is str for label in labels.values())
    cache_key = (name, *labels.items())  # text labels only: hashable
    found = _counters.get(cache_key) if cacheable else None
    if found is None:
        found = BoundCounter(name, texts)
        if cacheable:
            found = _counters.setdefault(cache_key, found)
    return found


def histogram(name: str, **labels: str) -> BoundHistogram:
    """The duration ``name`` with ``labels`` bound: ``histogram(name, **labels).observe(s)`` is
    ``observe(name, s, **labels)``."""
    cacheable = all(type(label) is str for label in labels.values())
    cache_key = (name, *labels.items())  # text labels only: hashable
    found = _histograms.get(cache_key) if cacheable else None
    if found is None:
        found = BoundHistogram(name, dict(labels))
        if cacheable:
            found = _histograms.setdefault(cache_key, found)
    return found


def inc(name: str, value: float = 1, **labels: object) -> None:
    if not value:
        return
    try:
        bound = _counters.get((name, *labels.items()))
    except TypeError:  # a label value that can't be hashed: not cached
        bound = None
    (bound if bound is not None else counter(name, **labels)).inc(value)


def gauge(name: str, value: float, **labels: object) -> None:
    texts = {key: str(label) for key, label in labels.items()}
    with _totals_lock:
        _gauges[_key(name, texts)] = value
    try:
        setter = getattr(get_sink(), "gauge", None)  # a sink of counters only has none
        if callable(setter):
            setter(name, value, texts)
    except Exception:
        _hook_failed()


def observe(name: str, seconds: float, **labels: str) -> None:
    try:
        found = _histograms.get((name, *labels.items()))
    except TypeError:
        found = None
    (found if found is not None else histogram(name, **labels)).observe(seconds)


def observe_many(name: str, values: list[float], **labels: str) -> None:
    """``observe`` of each of ``values`` (a batch's, e.g. the claim lag of each activity of a
    claim): one look-up of the sink and of the labelled histogram for the batch. A sink without
    ``observe_many`` gets one ``observe`` each."""
    if not values:
        return
    try:
        found = _histograms.get((name, *labels.items()))
    except TypeError:
        found = None
    (found if found is not None else histogram(name, **labels)).observe_many(values)


def totals() -> dict[str, float]:
    """Counter totals since the process started (all labels), for summaries and tests."""
    summed: dict[str, float] = {}
    with _totals_lock:
        for (name, _), value in _totals.items():
            summed[name] = summed.get(name, 0) + value
    return dict(summed)


def count(name: str, **labels: object) -> float:
    """The sum of a counter over every label set that includes ``labels``."""
    wanted = {(key, str(label)) for key, label in labels.items()}
    with _totals_lock:
        return sum(value for (n, given), value in _totals.items() if n == name and wanted <= set(given))


def gauge_value(name: str, **labels: object) -> float | None:
    with _totals_lock:
        return _gauges.get(_key(name, {key: str(label) for key, label in labels.items()}))


def serve(port: int, addr: str = "127.0.0.1") -> bool:
    """Serve ``/metrics`` for Prometheus on ``port``; False when prometheus-client is missing."""
    try:
        import prometheus_client
    except ImportError:
        return False
    prometheus_client.start_http_server(port, addr=addr)
    return True


def _hook_failed() -> None:
    """Metrics never break the work they count: a failing hook is logged at debug, and its
    value dropped."""
    log_event(
        logger,
        logging.DEBUG,
        "runnerq.metrics.failed",
        "A metrics hook failed; the value is not counted.",
        exc_info=True,
    )
