"""Retention's sweep of flow-control state: free concurrency slot rows and the partition keys no
claim can need again are deleted, slots in use and the keys of unfinished (or retryable)
activities stay; raced against concurrent claimers, the sweep never lets a partition run more
than its limit, never deadlocks a claim, loses nothing, and leaves the tables as small as what
is in use once the work has drained."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import connections

from runnerq_django import storage
from runnerq_django.storage import limits
from runnerq_django.storage.errors import StorageError
from runnerq_django.worker.maintenance import Maintenance
from tests.flow import handlers
from tests.flow.racing import RUNNING_PER_PARTITION, claimer, deadlocks
from tests.worker.support import fetch

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow_sweep"


def slot_rows(queue: str = Q) -> list[tuple]:
    return fetch(
        "SELECT partition_key, slot, activity_id FROM runnerq_flow_slots WHERE queue_name = %s"
        " ORDER BY partition_key, slot",
        [queue],
    )


def partition_rows(queue: str = Q) -> set:
    return {
        r[0] for r in fetch("SELECT activity_id FROM runnerq_flow_partitions WHERE queue_name = %s", [queue])
    }


def sweep_to_the_end(**options) -> tuple[int, int]:
    """Both walks over the whole of their tables, in pages of ``page``; (slots, keys) deleted."""
    slots = keys = 0
    page = limits.sweep_slots(Q, **options)
    slots += page.deleted
    while page.after is not None:
        page = limits.sweep_slots(Q, after=page.after, **options)
        slots += page.deleted
    options.pop("idle_s", None)
    part = limits.sweep_partitions(Q, **options)
    keys += part.deleted
    while part.after is not None:
        part = limits.sweep_partitions(Q, after=part.after, **options)
        keys += part.deleted
    return slots, keys


def test_the_sweep_keeps_what_is_in_use_and_deletes_the_rest():
    handles = handlers.per_key.enqueue_many([{"seconds": 0, "key": f"k{i}"} for i in range(6)], queue=Q)
    claimed = limits.claim_limited(Q, "flow.per_key", 1, limit=6, worker_id="w")
    assert len(claimed) == 6 and len(slot_rows()) == 6
    by_key = {a.payload["key"]: a for a in claimed}
    storage.complete_many(Q, [(by_key["k0"].claim, None), (by_key["k1"].claim, None)])
    storage.fail(Q, by_key["k2"].claim, "for good", retryable=False)  # failed: retry may run it again
    storage.fail(Q, by_key["k3"].claim, "again", retryable=True)  # retrying: runnable again
    storage.release(Q, [by_key["k4"].claim])  # pending again; k5 still runs
    ids = {a.payload["key"]: a.id for a in claimed}
    assert {h.id for h in handles} == set(ids.values())

    # Recently taken free slots stay for a while (for a claim to take them over in place).
    assert sweep_to_the_end(idle_s=3600, page=2) == (0, 2)  # only k0's and k1's keys: completed
    assert len(slot_rows()) == 6
    assert partition_rows() == {ids[k] for k in ("k2", "k3", "k4", "k5")}

    slots, keys = sweep_to_the_end(idle_s=0, page=2)  # pages of 2: the walks' cursors are used
    assert (slots, keys) == (5, 0)
    assert slot_rows() == [("k5", 0, ids["k5"])]  # the one still running keeps its slot
    assert partition_rows() == {ids[k] for k in ("k2", "k3", "k4", "k5")}

    # The swept slots are created afresh by the next claims, in their partitions.
    storage.complete_many(Q, [(by_key["k5"].claim, None)])
    again = limits.claim_limited(Q, "flow.per_key", 1, limit=6, worker_id="w")
    assert sorted(a.payload["key"] for a in again) == ["k4"]  # k3 waits for its retry delay
    assert [r[0] for r in slot_rows()] == ["k4", "k5"]
    storage.complete_many(Q, [(again[0].claim, None)])

    # Gone: an activity whose tree was deleted (retention, an operator) leaves its key behind.
    fetch("DELETE FROM runnerq_activities WHERE id = %s", [ids["k2"]])
    assert sweep_to_the_end(idle_s=0) == (2, 3)  # k4 and k5 completed, k2 gone
    assert partition_rows() == {ids["k3"]}
    assert slot_rows() == []


def test_the_sweep_leaves_other_queues_alone():
    handlers.per_key.enqueue_many([{"seconds": 0, "key": "a"}], queue="flow_sweep_other")
    [other] = limits.claim_limited("flow_sweep_other", "flow.per_key", 1, worker_id="w")
    storage.complete_many("flow_sweep_other", [(other.claim, None)])
    assert sweep_to_the_end(idle_s=0) == (0, 0)
    assert len(slot_rows("flow_sweep_other")) == 1 and len(partition_rows("flow_sweep_other")) == 1


MAX_RUNNING = 2
PARTITIONS = 30
ACTIVITIES = 2000
CLAIMERS = 6
SECONDS = 90.0


def claim_limited(rng: random.Random, worker_id: str) -> list:
    return limits.claim_limited(
        Q, "flow.per_key", MAX_RUNNING, limit=rng.randint(1, 16), lease_ms=60000, worker_id=worker_id
    )


def sweeper(done: threading.Event, errors: list, peaks: list, swept: list) -> None:
    """Retention's sweep of the queue in a loop, in small pages (many statements, every one
    racing the claims), checking the limit after each page."""
    slots_after = keys_after = None
    try:
        while not done.is_set():
            try:
                page = limits.sweep_slots(Q, after=slots_after, idle_s=0, page=7)
                slots_after = page.after
                keys = limits.sweep_partitions(Q, after=keys_after, page=50)
                keys_after = keys.after
            except StorageError as exc:
                errors.append(exc)
                continue
            swept.append((page.deleted, keys.deleted))
            peaks.append(fetch(RUNNING_PER_PARTITION, [Q])[0][0])
    finally:
        connections.close_all()


def test_the_sweep_races_claimers_without_passing_the_limit_or_deadlocking():
    handles = handlers.per_key.enqueue_many(
        [{"seconds": 0, "key": f"k{i % PARTITIONS}"} for i in range(ACTIVITIES)], queue=Q, retry_delay=0
    )
    before = deadlocks()
    done = threading.Event()
    errors: list = []
    peaks: list = []
    claimed: list = []
    swept: list = []
    threads = [
        threading.Thread(target=claimer, args=(Q, claim_limited, seed, done, errors, peaks, claimed))
        for seed in range(CLAIMERS)
    ]
    threads.append(threading.Thread(target=sweeper, args=(done, errors, peaks, swept)))
    for thread in threads:
        thread.start()
    done.wait(SECONDS)
    done.set()
    for thread in threads:
        thread.join(30)
    time.sleep(0.6)  # the threads' backends report their statistics as they exit
    assert errors == []
    assert deadlocks() - before == 0
    assert peaks and max(peaks) <= MAX_RUNNING
    assert sum(s for s, _ in swept) > 0 and sum(k for _, k in swept) > 0  # it did race the claims
    # Nothing lost: every activity finished (completed, or failed / dead-lettered by its attempts),
    # each claimed at least once.
    statuses = dict(
        fetch("SELECT status, count(*) FROM runnerq_activities WHERE queue_name = %s GROUP BY 1", [Q])
    )
    assert sum(statuses.values()) == ACTIVITIES
    assert set(statuses) <= {"completed", "failed", "dead_letter"}
    assert {h.id for h in handles} <= set(claimed)
    # Drained, the tables shrink to what is in use: no slot (nothing runs) and only the keys of
    # the activities an operator could run again.
    sweep_to_the_end(idle_s=0)
    assert slot_rows() == []
    retryable = {
        r[0]
        for r in fetch(
            "SELECT id FROM runnerq_activities WHERE queue_name = %s AND status IN ('failed', 'dead_letter')",
            [Q],
        )
    }
    assert partition_rows() == retryable


def test_the_worker_sweeps_flow_state_with_its_retention(settings):
    """``Maintenance.sweep_all``: the queue's free slots and completed activities' keys go."""
    handlers.per_key.enqueue_many([{"seconds": 0, "key": f"k{i}"} for i in range(3)], queue=Q)
    claimed = limits.claim_limited(Q, "flow.per_key", 1, limit=3, worker_id="w")
    storage.complete_many(Q, [(a.claim, None) for a in claimed[:2]])
    retention = {
        "COMPLETED_SECONDS": 0,
        "FAILED_SECONDS": 0,
        "EVENTS_SECONDS": 0,
        "BATCH": 500,
        "INTERVAL_SECONDS": 60,
        "CONSOLE_SECONDS": 0,
        "FLOW_SLOT_IDLE_SECONDS": 0,
    }
    from django.db import DEFAULT_DB_ALIAS

    maintenance = Maintenance(
        [Q],
        DEFAULT_DB_ALIAS,
        reaper_interval=60,
        reaper_batch=100,
        retention=retention,
        pool_stale_seconds=60,
        stop=threading.Event(),
    )
    maintenance.sweep_all()
    assert slot_rows() == [(claimed[2].payload["key"], 0, claimed[2].id)]
    assert partition_rows() == {claimed[2].id}
