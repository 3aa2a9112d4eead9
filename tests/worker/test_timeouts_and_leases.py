"""The activity timeout, lease renewal, and a handler stopped once its claim is lost."""

from __future__ import annotations

import time

import pytest

from runnerq_django import ActivityFailed
from runnerq_django.storage import pools
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
