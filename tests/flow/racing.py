"""Claimer threads racing each other on a limited type (tests/flow's concurrency and sweep
races): each on its own database connection, claiming and ending what it claimed every way an
attempt ends (complete, fail, release) until the queue has drained."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from django.db import connections

from runnerq_django import storage
from runnerq_django.storage.errors import StorageError
from tests.worker.support import fetch

# The most activities of one partition processing at once, in ``queue``.
RUNNING_PER_PARTITION = """
SELECT coalesce(max(n), 0) FROM (
    SELECT count(*) AS n FROM runnerq_activities a
    JOIN runnerq_flow_partitions p ON p.activity_id = a.id
    WHERE a.queue_name = %s AND a.status = 'processing'
    GROUP BY p.partition_key
) per_partition
"""


def deadlocks() -> int:
    fetch("SELECT pg_stat_clear_snapshot()")
    return fetch("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")[0][0]


def claimer(
    queue: str,
    claim: Callable[[random.Random, str], list],
    seed: int,
    done: threading.Event,
    errors: list,
    peaks: list,
    claimed: list,
) -> None:
    """Claim with ``claim(rng, worker_id)`` until ``done`` is set, or set it once ``queue`` holds
    nothing runnable or running. Each claim's ids go to ``claimed``, the peak per partition
    after it to ``peaks``; 80% of what it claims is completed, 10% failed (retryable for its
    first two attempts), 10% released. Storage errors (a deadlock victim's among them) go to
    ``errors``."""
    rng = random.Random(seed)
    try:
        while not done.is_set():
            try:
                got = claim(rng, f"w{seed}")
            except StorageError as exc:
                errors.append(exc)
                continue
            if not got:
                if not fetch(
                    "SELECT 1 FROM runnerq_activities WHERE queue_name = %s"
                    " AND status IN ('pending', 'retrying', 'processing') LIMIT 1",
                    [queue],
                ):
                    done.set()
                time.sleep(0.001)
                continue
            claimed.extend(a.id for a in got)
            peaks.append(fetch(RUNNING_PER_PARTITION, [queue])[0][0])
            ways = [rng.random() for _ in got]
            try:
                storage.complete_many(queue, [(a.claim, None) for a, w in zip(got, ways) if w < 0.8])
                for activity in (a for a, w in zip(got, ways) if 0.8 <= w < 0.9):
                    storage.fail(queue, activity.claim, "again", retryable=activity.retry_count < 2)
                storage.release(queue, [a.claim for a, w in zip(got, ways) if w >= 0.9])
            except StorageError as exc:
                errors.append(exc)
    finally:
        connections.close_all()  # the backend exits and flushes its statistics (deadlocks)
