"""The activity timeout, lease renewal, and a handler stopped once its claim is lost."""

from __future__ import annotations

import threading
import time

import pytest

from runnerq_django import ActivityFailed, storage
from runnerq_django.storage import pools
from runnerq_django.storage.types import NewActivity
from runnerq_django.worker.attempts import Attempts
from runnerq_django.worker.leases import LeaseKeeper
from tests.helpers import wait_until
from tests.worker import handlers
from tests.worker.support import events_of, fetch, row_of, runs


@pytest.mark.parametrize(
    "handler, name", [(handlers.busy_timeout, "busy_timeout"), (handlers.async_timeout, "async_timeout")]
)
def test_the_timeout_fails_the_attempt_and_stops_the_handler(worker, handler, name):
    worker()
    began = time.monotonic()
    with pytest.raises(ActivityFailed) as failed:
        handler.enqueue(None).result(timeout=15)
    assert time.monotonic() - began < 5  # not the handler's 10 s
    assert failed.value.kind == "dead_letter"  # max_attempts=1: the timed-out attempt was the last
    assert "timeout of 1s" in failed.value.error
    time.sleep(0.2)
    assert handlers.CALLS[f"{name}.start"] == 1 and handlers.CALLS[f"{name}.end"] == 0  # interrupted


def test_leases_are_renewed_while_a_handler_runs(worker):
    worker(lease_seconds=1.2, heartbeat_seconds=0.3)
    handle = handlers.slow.enqueue({"seconds": 2.5})
    wait_until(lambda: runs("start", handle.id), message="the handler to start")
    first = row_of(handle.id)["lease_deadline_ms"]
    time.sleep(1.5)  # longer than the lease: only renewals keep it
    assert row_of(handle.id)["lease_deadline_ms"] > first
    assert handle.result(timeout=10)["slept"] == 2.5
    assert events_of(handle.id) == []  # never requeued


def test_a_lost_claim_stops_the_handlers_writes(worker):
    worker(lease_seconds=1.5, heartbeat_seconds=0.5)
    handle = handlers.step_loop.enqueue({"steps": 200})
    wait_until(lambda: len(runs(activity_id=handle.id)) >= 3, message="the first checkpoints")
    # Another worker reclaims it: its token no longer matches ours (a reaper + reclaim elsewhere).
    fetch("UPDATE runnerq_activities SET current_worker_id = 'someone-else:1' WHERE id = %s", [handle.id])
    time.sleep(1.2)  # the next renewal finds the claim gone and interrupts the handler
    written = len(runs(activity_id=handle.id))
    time.sleep(0.8)
    assert len(runs(activity_id=handle.id)) == written
    checkpoints = fetch("SELECT count(*) FROM runnerq_results WHERE owner_activity_id = %s", [handle.id])[0][
        0
    ]
    assert checkpoints <= written + 1  # nothing written after the loss but the fenced-out attempt
    row = row_of(handle.id)
    assert row["status"] == "processing" and row["current_worker_id"] == "someone-else:1"  # untouched by us


def test_the_worker_keeps_its_pool_rows_alive(worker, queue_name):
    instance = worker(queues=[queue_name], heartbeat_seconds=0.3, lease_seconds=3)
    seen = fetch(
        "SELECT last_seen_at, max_workers, activity_types FROM runnerq_worker_pools WHERE queue_name = %s",
        [queue_name],
    )
    assert len(seen) == 1 and seen[0][1] == 4 and "t.echo" in seen[0][2]
    time.sleep(1.0)
    later = fetch("SELECT last_seen_at FROM runnerq_worker_pools WHERE queue_name = %s", [queue_name])[0][0]
    assert later > seen[0][0]
    assert pools.live_capacity(5)[queue_name].slots == 4
    instance.request_stop()
    instance.drain()
    assert fetch("SELECT count(*) FROM runnerq_worker_pools WHERE queue_name = %s", [queue_name])[0][0] == 0


def test_more_claims_than_one_renewal_takes_are_all_renewed(transactional_db, queue_name):
    """Completions waiting in a lagging ack buffer keep their claims: a process can hold more than
    ``renew_many`` takes in one call (1000). Before the fix every renewal then failed ("claims: at
    most 1000 per call, got 1312") and the leases of running handlers ran out."""
    held = 1312  # past the 1000 of one call, as in the report
    storage.submit_many(queue_name, [NewActivity("t.noop") for _ in range(held)])
    claimed = []
    while len(claimed) < held:
        claimed += storage.claim(queue_name, limit=500, lease_ms=60_000, worker_id="w:1")
    attempts = Attempts()
    attempts.add(claimed)
    keeper = LeaseKeeper(
        attempts,
        "default",
        lease_ms=600_000,
        heartbeat=1,
        on_timeout=lambda attempt: None,
        on_beat=lambda: None,
        stop=threading.Event(),
    )
    before = time.monotonic()
    keeper.renew()
    assert all(a.lost is None and a.lease_until >= before + 600 for a in attempts.snapshot())
    [(renewed,)] = fetch(
        "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s "
        "AND lease_deadline_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 500000",
        [queue_name],
    )
    assert renewed == held
