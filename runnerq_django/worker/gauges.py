"""The worker's gauges: the depth and the age of the oldest due activity of each queue it serves
(read from the database by the maintenance thread), and its attempts in flight per type (from its
own registry, at each heartbeat).

Every worker reports its own queues' depth, so a fleet reports the same value several times:
aggregate with ``max by (queue, state)``, not ``sum``. The same goes for the age of the database's
xmin horizon (``xmin_horizon_age_seconds`` and ``_xids``, labelled by database alias only): what a
transaction left open costs the claims (``storage.horizon``).
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime

from runnerq_django import metrics
from runnerq_django.worker.attempts import Attempts

# A count stops at this many rows: the gauge says "at least this many" beyond it, and one read
# stays a bounded index range however long the backlog grows.
DEPTH_CAP = 100_000
QUEUE_METRICS_INTERVAL = 15.0  # seconds between two reads of the queues' depth


def report_queues(alias: str, queues: list[str]) -> None:
    """``queue_depth{queue,state}`` and ``queue_oldest_due_age_seconds{queue}`` (0 when nothing
    is due)."""
    from runnerq_django.storage import reads

    if isinstance(metrics.get_sink(), metrics.NoopSink):  # nobody would read them: spare the queries
        return
    for queue, counts in reads.queue_depth(alias, queues, DEPTH_CAP).items():
        for state, count in counts.items():
            metrics.gauge("queue_depth", count, queue=queue, state=state)
    now = reads.database_now(alias)
    for queue, (oldest, _raw) in reads.oldest_runnable(alias, queues).items():
        metrics.gauge("queue_oldest_due_age_seconds", _age(now, oldest), queue=queue)
    report_horizon(alias)


def report_horizon(alias: str) -> None:
    """``xmin_horizon_age_seconds{database}`` and ``xmin_horizon_age_xids{database}``."""
    from runnerq_django.storage.horizon import horizon

    found = horizon(alias)
    metrics.gauge("xmin_horizon_age_seconds", round(found.age_seconds, 3), database=alias)
    metrics.gauge("xmin_horizon_age_xids", found.age_xids, database=alias)


def _age(now: datetime, oldest: datetime | None) -> float:
    # ``None``: nothing due, or a due time of -infinity (a hand-written row), which is not an age.
    return 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())


class InFlight:
    """``activity_in_flight{queue,type}``: this process's attempts claimed or running. A type
    that had some at the last report and has none now is reported as 0, not left at its last
    value."""

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts
        self._reported: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def report(self) -> None:
        counts = Counter((a.queue, a.activity.activity_type) for a in self.attempts.snapshot())
        with self._lock:
            for queue, activity_type in self._reported - set(counts):
                metrics.gauge("activity_in_flight", 0, queue=queue, type=activity_type)
            for (queue, activity_type), count in counts.items():
                metrics.gauge("activity_in_flight", count, queue=queue, type=activity_type)
            self._reported = set(counts)
