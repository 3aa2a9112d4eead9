"""The worker's maintenance: the reaper under the fleet-wide lock, the retention sweep, pruning of
dead workers' pool rows. Short intervals through RUNNERQ settings (in-process, or passed to
worker processes by tests/worker/settings.py)."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
from django.test import override_settings

from runnerq_django import storage
from runnerq_django.storage import pools
from runnerq_django.worker.maintenance import advisory_key
from tests.helpers import wait_until
from tests.worker import handlers
from tests.worker.support import events_of, fetch, row_of, wait_for_workers

FAST = ("--poll-interval", "0.2", "--concurrency", "4")


def test_the_fleet_lock_lets_one_worker_at_a_time_reap(worker_process, queue_name, live_db_url):
    """Whoever holds a queue's reaper lock keeps every other worker from reaping it: while this
    test holds it (as a third worker mid-sweep would), two live workers leave expired leases
    alone; once it is released, each lease is reaped exactly once between them."""
    handles = handlers.echo.enqueue_many(list(range(5)), queue=queue_name)
    claimed = storage.claim(queue_name, limit=5, lease_ms=1, worker_id="dead-worker")  # expires at once
    assert len(claimed) == 5
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
        "RUNNERQ_TEST_SETTINGS": json.dumps({"REAPER_INTERVAL_SECONDS": 0.3}),
    }
    holder = psycopg.connect(live_db_url)  # not autocommit: the transaction-level lock lasts until commit
    try:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(f"reap:{queue_name}")])
        procs = [
            worker_process("--queue", queue_name, "--log-format", "json", *FAST, env=env) for _ in range(2)
        ]
        wait_for_workers(queue_name, 2)
        time.sleep(1.5)  # several reaper rounds in each worker
        rows = [row_of(h.id) for h in handles]
        assert {r["status"] for r in rows} == {"processing"}
        assert all(r["current_worker_id"].startswith("dead-worker:") for r in rows)
    finally:
        holder.commit()
        holder.close()
    assert [h.result(timeout=20) for h in handles] == list(range(5))  # reaped, then run
    for handle in handles:
        assert events_of(handle.id) == ["Requeued"] and row_of(handle.id)["retry_count"] == 1
    reaped = [
        json.loads(line)["count"]
        for proc in procs
        for line in proc.log().splitlines()
        if line.startswith("{") and '"runnerq.reaper.requeued"' in line
    ]
    assert sum(reaped) == 5


def _finished(queue: str, *, ok: bool, hours_ago: float = 0) -> uuid.UUID:
    handle = handlers.echo.enqueue("x", queue=queue)
    [claimed] = storage.claim(queue, limit=1, lease_ms=30_000, worker_id="test")
    if ok:
        storage.complete(queue, claimed.claim, "x")
    else:
        storage.fail(queue, claimed.claim, "no", retryable=False)
    if hours_ago:
        fetch(
            "UPDATE runnerq_activities SET completed_at = now() - make_interval(hours => %s) WHERE id = %s",
            [hours_ago, handle.id],
        )
    return handle.id


@override_settings(RUNNERQ={"RETENTION": {"COMPLETED_SECONDS": 3600, "INTERVAL_SECONDS": 1}})
def test_the_worker_sweeps_finished_trees_and_prunes_dead_pools(worker, queue_name):
    old = _finished(queue_name, ok=True, hours_ago=2)
    young = _finished(queue_name, ok=True)
    failed_old = _finished(queue_name, ok=False, hours_ago=2)  # FAILED_SECONDS stays 30 days
    dead_pool = uuid.uuid4()
    pools.register(dead_pool, queue_name, 4, None)
    fetch(
        "UPDATE runnerq_worker_pools SET last_seen_at = now() - interval '2 hours' WHERE pool_id = %s",
        [dead_pool],
    )
    instance = worker(queues=[queue_name])
    wait_until(lambda: not row_of(old), timeout=15, message="the old completed tree to be swept")
    for table, column in (("runnerq_inputs", "activity_id"), ("runnerq_results", "activity_id")):
        assert fetch(f"SELECT count(*) FROM {table} WHERE {column} = %s", [old])[0][0] == 0
    assert row_of(young)["status"] == "completed" and row_of(failed_old)["status"] == "failed"
    wait_until(
        lambda: not fetch("SELECT 1 FROM runnerq_worker_pools WHERE pool_id = %s", [dead_pool]),
        timeout=15,
        message="the dead worker's pool row to be pruned",
    )
    live = {
        r[0] for r in fetch("SELECT pool_id FROM runnerq_worker_pools WHERE queue_name = %s", [queue_name])
    }
    assert live == set(instance.registration.pool_ids.values())  # its own row stays
