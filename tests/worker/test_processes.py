"""Real worker processes: crashes, signals, lost database connections, load, and a durable
workflow across restarts. Each asserts on the database, not on the worker's word."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from runnerq_django.spec.keys import checkpoint_id
from tests.helpers import stop_process, wait_until
from tests.worker import handlers
from tests.worker.support import events_of, fetch, row_of, runs, status_of, wait_for_status

pytestmark = pytest.mark.slow

FAST = ("--poll-interval", "0.2", "--concurrency", "4")


def test_kill_9_mid_handler_is_reaped_and_completed_by_another_worker(worker_process):
    handle = handlers.slow.enqueue({"seconds": 2}, max_attempts=3)
    first = worker_process("--lease", "2", *FAST)
    wait_until(lambda: runs("start", handle.id), timeout=30, message="the handler to start")
    os.killpg(first.pid, signal.SIGKILL)  # no drain, no release: the lease must run out
    first.wait(10)
    assert status_of(handle.id) == "processing"
    second = worker_process("--lease", "2", *FAST)
    assert handle.result(timeout=40)["pid"] == second.pid
    starts = runs("start", handle.id)
    assert [r[3] for r in starts] == [first.pid, second.pid]
    assert [r[2] for r in starts] == [1, 2]  # the reaped attempt counted
    assert len(runs("end", handle.id)) == 1
    assert events_of(handle.id) == ["Requeued"]
    row = row_of(handle.id)
    assert row["status"] == "completed" and row["retry_count"] == 1


def test_sigterm_drains_then_releases_what_is_left(worker_process):
    short = [handlers.slow.enqueue({"seconds": 1}) for _ in range(2)]
    long = handlers.slow.enqueue({"seconds": 30})
    proc = worker_process("--shutdown-grace", "2.5", "--lease", "30", *FAST)
    wait_until(lambda: len(runs("start")) == 3, timeout=30, message="all three handlers to start")
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert time.monotonic() - began < 8  # the grace, not the 30 s handler
    for handle in short:
        assert status_of(handle.id) == "completed"  # finished within the grace
    row = row_of(long.id)
    assert row["status"] == "pending" and row["current_worker_id"] is None
    assert row["retry_count"] == 0 and events_of(long.id) == []  # released: no attempt counted
    assert "worker.released" in proc.log()
    successor = worker_process("--lease", "30", "--shutdown-grace", "0.5", *FAST)
    # Released work is taken at once, not after its 30 s lease.
    wait_until(
        lambda: any(r[3] == successor.pid for r in runs("start", long.id)),
        timeout=20,
        message="the released activity to start on the next worker",
    )


def test_a_second_signal_exits_at_once(worker_process):
    handlers.slow.enqueue({"seconds": 30})
    proc = worker_process("--shutdown-grace", "60", *FAST)
    wait_until(lambda: runs("start"), timeout=30, message="the handler to start")
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "worker.stopping" in proc.log(), timeout=10, message="the drain to begin")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 128 + signal.SIGTERM
    assert "second signal" in proc.log()
    assert "Activities still running return to the queue when their leases run out." in proc.log()


@pytest.mark.direct_postgres(
    "it kills the worker's server sessions and waits for its listener to reconnect; behind the pooler the "
    "worker has no server session of its own (PgBouncer replaces a killed one unseen) and no listener"
)
def test_terminated_database_connections_are_reopened(worker_process):
    proc = worker_process("--lease", "5", *FAST)
    warm = handlers.counted.enqueue_many(list(range(8)))  # every thread opens its own connection
    assert [h.result(timeout=30) for h in warm] == list(range(8))
    # The dispatcher LISTENs at its first wait, which may come after the warm-up's results.
    wait_until(lambda: "runnerq.listener.listening" in proc.log(), timeout=15, message="the worker's LISTEN")
    killed = fetch(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )[0][0]
    assert killed >= 4  # dispatcher (which listens), lease keeper, ack writer, handler threads
    after = [handlers.echo.enqueue(n) for n in range(20)]
    assert [h.result(timeout=30) for h in after] == list(range(20))
    # Handlers that use the database: a thread whose session was killed fails its first query
    # once (a retryable failure), then reconnects.
    again = handlers.counted.enqueue_many(list(range(8)))
    assert [h.result(timeout=30) for h in again] == list(range(8))
    assert max(row_of(h.id)["retry_count"] for h in again) <= 1
    assert proc.poll() is None
    wait_until(
        lambda: "runnerq.listener.reconnected" in proc.log(), timeout=15, message="the listener to reconnect"
    )


def test_no_listen_mode_polls(worker_process):
    proc = worker_process("--no-listen", *FAST)
    assert handlers.echo.enqueue("polled").result(timeout=30) == "polled"
    assert "runnerq.listener.listening" not in proc.log()  # its dispatcher never ran LISTEN


def test_10000_activities_through_2_processes_x_8_threads_each_exactly_once(worker_process):
    total = 10_000
    for start in range(0, total, 1000):
        handlers.counted.enqueue_many(list(range(start, start + 1000)))
    proc = worker_process("--processes", "2", "--concurrency", "8", "--queue", "default")
    wait_until(
        lambda: fetch("SELECT count(*) FROM runnerq_activities WHERE status = 'completed'")[0][0] == total,
        timeout=90,
        interval=0.2,
        message="all activities to complete",
    )
    assert fetch("SELECT count(*), count(DISTINCT activity_id) FROM rq_test_runs WHERE what = 'run'")[0] == (
        total,
        total,
    )
    assert fetch("SELECT count(DISTINCT pid) FROM rq_test_runs")[0][0] == 2  # both processes worked
    assert (
        fetch(
            "SELECT count(*) FROM runnerq_results r JOIN runnerq_activities a ON a.id = r.activity_id "
            "WHERE r.state = 'Ok' AND r.data::text = (SELECT payload::text FROM runnerq_inputs WHERE activity_id = a.id)"
        )[0][0]
        == total
    )
    assert fetch(
        "SELECT max(retry_count), count(*) FILTER (WHERE last_worker_id IS NULL) FROM runnerq_activities"
    )[0] == (0, 0)
    assert fetch("SELECT count(*) FROM runnerq_events")[0][0] == 0
    stop_process(proc)
    assert proc.returncode == 0


def test_a_durable_workflow_survives_worker_restarts(worker_process):
    """Sleep, signal and two children, with a worker restart in each wait. INLINE_WAIT_SECONDS=0
    makes every wait a park (no thread holds the workflow), and the children outlive the third
    worker's grace, so the parent is parked on them when that worker stops and they are released
    half-run: the fourth worker runs them again and wakes the parent."""
    handle = handlers.workflow.enqueue({"sleep": 1, "child_seconds": 3})
    args = ("--lease", "5", "--shutdown-grace", "0.5", *FAST)
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
        "RUNNERQ_TEST_SETTINGS": json.dumps({"INLINE_WAIT_SECONDS": 0}),
    }
    first = worker_process(*args, env=env)
    wait_until(lambda: runs("begin", handle.id), timeout=30, message="the workflow to begin")
    wait_for_status(handle.id, "waiting")  # parked in its sleep
    slept = row_of(handle.id)
    assert (
        slept["waiting_result_id"] is None and slept["scheduled_at"] is not None
    )  # a timer, no result awaited
    stop_process(first)
    assert first.returncode == 0

    second = worker_process(*args, env=env)
    wait_until(lambda: runs("slept", handle.id), timeout=30, message="the sleep to end on the second worker")
    wait_for_status(handle.id, "waiting")  # now parked on the signal
    assert row_of(handle.id)["waiting_result_id"] == checkpoint_id(handle.id, "signal", "approve")
    stop_process(second)
    assert handle.signal("approve", {"by": "ops"}) is True  # delivered while no worker runs

    third = worker_process(*args, env=env)
    children = wait_until(
        lambda: (
            [
                r[0]
                for r in fetch(
                    "SELECT id FROM runnerq_activities WHERE parent_activity_id = %s ORDER BY idempotency_key",
                    [handle.id],
                )
            ]
            if len(runs("start")) >= 2
            else None
        ),
        timeout=30,
        message="both children to start",
    )
    wait_for_status(handle.id, "waiting")  # parked on its children while they run
    parked = row_of(handle.id)
    assert parked["waiting_result_id"] in children and parked["current_worker_id"] is None
    assert (
        fetch("SELECT count(*) FROM runnerq_dependencies WHERE waiter_activity_id = %s", [handle.id])[0][0]
        == 2
    )
    stop_process(third)  # the children outlive the grace: released mid-run
    assert third.returncode == 0
    assert {status_of(child) for child in children} == {"pending"}
    assert row_of(handle.id)["status"] == "waiting"  # still parked across the restart

    fourth = worker_process(*args, env=env)
    result = handle.result(timeout=60)
    assert result == {"approval": {"by": "ops"}, "children": 2}
    for phase, worker in (("begin", first), ("slept", second), ("signalled", third), ("end", fourth)):
        assert [r[3] for r in runs(phase, handle.id)] == [worker.pid], phase  # each side effect once
    for child in children:
        assert status_of(child) == "completed"
        assert [r[3] for r in runs("start", child)] == [third.pid, fourth.pid]  # rerun after the release
        assert [r[3] for r in runs("end", child)] == [fourth.pid]
    assert row_of(handle.id)["retry_count"] == 0  # parks and restarts cost no attempt
