"""Concurrency limits under concurrent claimers: threads, each on its own database connection,
claiming a limited type over a few partitions and ending what they claimed every way an attempt
ends (complete, fail, release), as fast as they can. No claim may lose a deadlock (40P01, which
the slot bookkeeping used to hit when two claims took or gave back slots in different orders),
and no partition ever runs more than its limit. The rated claim, whose start slots are taken the
same way, is raced too."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import connections

from runnerq_django import storage
from runnerq_django.storage import limits
from runnerq_django.storage.errors import StorageError
from tests.flow import handlers
from tests.worker.support import fetch

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow_race"
MAX_RUNNING = 4
PARTITIONS = 20
ACTIVITIES = 3000
CLAIMERS = 8
SECONDS = 60.0

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


def claim_limited(rng: random.Random, worker_id: str) -> list:
    return limits.claim_limited(
        Q, "flow.per_key", MAX_RUNNING, limit=rng.randint(1, 32), lease_ms=60000, worker_id=worker_id
    )


def claim_rated(rng: random.Random, worker_id: str) -> list:
    """The rated claim of the same type and partitions: 8 starts per 50 ms window per partition."""
    return limits.claim_rated(
        Q, "flow.per_key", 8, 0.05, limit=rng.randint(1, 32), lease_ms=60000, worker_id=worker_id
    )


def claimer(claim, seed: int, done: threading.Event, errors: list, peaks: list, claims: list) -> None:
    rng = random.Random(seed)
    try:
        while not done.is_set():
            try:
                got = claim(rng, f"w{seed}")
            except StorageError as exc:
                errors.append(exc)
                continue
            claims.append(len(got))
            if not got:
                if not fetch(
                    "SELECT 1 FROM runnerq_activities WHERE queue_name = %s"
                    " AND status IN ('pending', 'retrying', 'processing') LIMIT 1",
                    [Q],
                ):
                    done.set()
                time.sleep(0.001)
                continue
            peaks.append(fetch(RUNNING_PER_PARTITION, [Q])[0][0])
            ways = [rng.random() for _ in got]
            try:
                storage.complete_many(Q, [(a.claim, None) for a, w in zip(got, ways) if w < 0.8])
                for activity in (a for a, w in zip(got, ways) if 0.8 <= w < 0.9):
                    storage.fail(Q, activity.claim, "again", retryable=activity.retry_count < 2)
                storage.release(Q, [a.claim for a, w in zip(got, ways) if w >= 0.9])
            except StorageError as exc:
                errors.append(exc)
    finally:
        connections.close_all()  # the backend exits and flushes its statistics (deadlocks)


@pytest.mark.parametrize("claim", [claim_limited, claim_rated], ids=["concurrency", "rate"])
def test_concurrent_claimers_never_deadlock_and_never_pass_the_limit(claim):
    handlers.per_key.enqueue_many(
        [{"seconds": 0, "key": f"k{i % PARTITIONS}"} for i in range(ACTIVITIES)], queue=Q, retry_delay=0
    )
    before = deadlocks()
    done = threading.Event()
    errors: list = []
    peaks: list = []
    claims: list = []
    threads = [
        threading.Thread(target=claimer, args=(claim, seed, done, errors, peaks, claims))
        for seed in range(CLAIMERS)
    ]
    for thread in threads:
        thread.start()
    done.wait(SECONDS)
    done.set()
    for thread in threads:
        thread.join(30)
    time.sleep(0.6)  # the claimers' backends report their statistics as they exit
    assert errors == []  # a deadlock victim raises Conflict (40P01) from the claim
    assert deadlocks() - before == 0
    if claim is claim_limited:
        assert peaks and max(peaks) <= MAX_RUNNING
    assert fetch(
        "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status IN ('pending', 'retrying')",
        [Q],
    ) == [(0,)]  # drained: every slot given back was taken again
    assert sum(claims) >= ACTIVITIES
