"""What one bad row or one fault must not do to other work, with real worker processes: a row
Python can't read fails alone; a worker frozen between its claim and its handlers starts none
of them once its lease is over; SIGTERM while the supervisor restarts a child ends cleanly."""

from __future__ import annotations

import os
import random
import re
import signal
import time

import psycopg
import pytest

from runnerq_django import storage
from tests.helpers import wait_until
from tests.storage.support import POISONS, poison
from tests.worker import handlers
from tests.worker.support import events_of, fetch, runs, wait_for_status, wait_for_workers

pytestmark = pytest.mark.slow


def test_rows_python_cannot_read_fail_alone_and_every_other_one_runs_once(worker_process):
    """The reproduction of the issue: without the fix the claim batches holding a bad row were
    left processing, reaped with an attempt counted, and good rows dead-lettered unrun."""
    good = handlers.counted.enqueue_many(list(range(12)), max_attempts=2)
    bad = {kind: handlers.counted.enqueue(kind, max_attempts=2).id for kind in POISONS}
    reasons = {kind: poison(activity_id, kind) for kind, activity_id in bad.items()}
    worker = worker_process("--lease", "2", "--concurrency", "4", "--poll-interval", "0.2")

    assert [handle.result(timeout=60) for handle in good] == list(range(12))
    for activity_id in bad.values():
        wait_for_status(activity_id, "failed", "dead_letter", timeout=30)
    for handle in good:
        assert [r[2] for r in runs("run", handle.id)] == [1]  # one run, the first attempt
        assert fetch("SELECT retry_count FROM runnerq_activities WHERE id = %s", [handle.id]) == [(0,)]
        assert events_of(handle.id) == []
    for kind, activity_id in bad.items():
        [(status, retry_count, error)] = fetch(
            "SELECT status, retry_count, last_error FROM runnerq_activities WHERE id = %s", [activity_id]
        )
        assert (status, retry_count) == ("failed", 0), kind
        assert error.startswith(reasons[kind]), (kind, error)
        assert events_of(activity_id) == ["Failed"] and runs(activity_id=activity_id) == []
    assert "dispatcher.claim_failed" not in worker.log()


def test_a_worker_frozen_after_its_claim_starts_no_handler_once_its_lease_is_over(
    worker_process, live_db_url
):
    """Freeze the worker while its claim is in flight (the claim waits on a lock the test holds;
    the worker is stopped, then the lock released, so the claim commits while the worker is
    frozen), let the lease run out, reap, resume. The claims are dropped: every activity runs
    once, on its second attempt, none under the reaped first claim."""
    handles = handlers.counted.enqueue_many(list(range(40)), delay=3600)
    ids = [handle.id for handle in handles]
    # One type: its claim is the single-type walk, which reads runnerq_inputs under the lock below.
    worker = worker_process("--lease", "2", "--concurrency", "8", "--poll-interval", "0.2", "-t", "t.counted")
    wait_for_workers("default", 1)
    # The claim is a prepared statement, prepared on its first run in its own round trip: a first
    # run under the lock would wait in its Parse, and the frozen worker would never send the
    # Execute. So the lock waits until one claim has run (its backend idle after it).
    wait_until(
        lambda: (
            fetch(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'idle' AND query LIKE '%%claim_order%%'"
            )[0][0]
            >= 1
        ),
        timeout=20,
        message="the worker's first claim",
    )
    with psycopg.connect(live_db_url) as blocker:
        blocker.execute("LOCK TABLE runnerq_inputs IN ACCESS EXCLUSIVE MODE")  # the claim reads inputs
        fetch("UPDATE runnerq_activities SET scheduled_at = now() WHERE id = ANY(%s)", [ids])
        wait_until(
            lambda: (
                fetch(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query LIKE '%%claim_order%%'"
                )[0][0]
                == 1
            ),
            timeout=20,
            message="the worker's claim to wait on the lock",
        )
        os.killpg(worker.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: fetch("SELECT count(*) FROM runnerq_activities WHERE status = 'processing'")[0][0] == 8,
            timeout=20,
            message="the claim of 8 to commit",
        )
        claimed = [r[0] for r in fetch("SELECT id FROM runnerq_activities WHERE status = 'processing'")]
        time.sleep(2.2)  # the 2 s lease runs out
        assert storage.reap("default", 100) == 8
    finally:
        os.killpg(worker.pid, signal.SIGCONT)

    wait_until(
        lambda: fetch("SELECT count(*) FROM runnerq_activities WHERE status = 'completed'")[0][0] == 40,
        timeout=60,
        message="all 40 to complete",
    )
    for activity_id in claimed:
        assert [r[2] for r in runs("run", activity_id)] == [2], "a dropped claim's handler ran"
    assert len(runs("run")) == 40
    assert len(re.findall(r"the lease ran out before the handler started", worker.log())) == 8


def test_a_worker_frozen_while_it_runs_starts_no_handler_of_a_reaped_claim_in_25_trials(worker_process):
    """The issue's reproduction, repeated: a busy ``-c 8`` worker is frozen at a random moment
    (its threads anywhere: claiming, between a claim and its handler, inside one, queueing a
    completion), its claims are reaped once their lease is over, and it is resumed. No handler
    body of a reaped claim may start after the resume. Before the fix a thread that had passed
    ``enter_handler``'s look at the lease just before the freeze went on into the body after the
    resume: in every run at ``-v 2``, whose ``activity.started`` line (written between the look
    and the body) gives up the GIL, in about 1 run of 6 without it."""
    rng = random.Random()
    worker = worker_process(
        "--lease", "0.6", "--concurrency", "8", "--poll-interval", "0.2", "-t", "t.stamped", "-v", "2"
    )
    wait_for_workers("default", 1)
    late, reaped = [], 0
    for trial in range(25):
        handlers.stamped.enqueue_many([None] * 200)
        time.sleep(rng.uniform(0.05, 0.3))
        os.killpg(worker.pid, signal.SIGSTOP)
        try:
            time.sleep(0.8)  # the 0.6 s lease runs out, by any clock
            # A claim the server ran late (sent before the freeze) has a later lease: wait it out.
            wait_until(
                lambda: (
                    not fetch(
                        "SELECT 1 FROM runnerq_activities WHERE status = 'processing' "
                        "AND lease_deadline_ms >= extract(epoch FROM clock_timestamp()) * 1000 LIMIT 1"
                    )
                ),
                timeout=20,
                message=f"trial {trial}: every lease over",
            )
            # Skipped: rows under a completion the worker was writing when it froze (locked, and
            # still its own: written once it resumes).
            ids = storage.reap_ids("default", 1000)
            # activity id -> the attempt its reaped claim was for (the reap counted it in retry_count)
            held = dict(fetch("SELECT id, retry_count FROM runnerq_activities WHERE id = ANY(%s)", [ids]))
            resumed_at = time.time()  # a frozen process takes no timestamp: a later one is after SIGCONT
        finally:
            os.killpg(worker.pid, signal.SIGCONT)
        reaped += len(held)
        # Settled: nothing claimed and nothing due left (a retry waiting for its backoff runs later).
        wait_until(
            lambda: (
                not fetch(
                    "SELECT 1 FROM runnerq_activities WHERE status = 'processing' "
                    "OR (status = 'pending' AND (scheduled_at IS NULL OR scheduled_at <= now())) LIMIT 1"
                )
            ),
            timeout=60,
            message=f"trial {trial}: the worker to run every due activity",
        )
        late += [
            (trial, activity_id, attempt)
            for activity_id, attempt, at in fetch(
                "SELECT activity_id, attempt, extract(epoch FROM at) FROM rq_test_runs "
                "WHERE what = 'run' AND activity_id = ANY(%s)",
                [list(held)],
            )
            if attempt == held[activity_id] and at > resumed_at
        ]
    assert late == [], "handlers of reaped claims started after the resume"
    assert reaped >= 25  # the freezes caught claims in flight


@pytest.mark.parametrize("when", ["starting", "backoff"])
def test_sigterm_while_the_supervisor_restarts_a_child_stops_cleanly(worker_process, when):
    """``starting``: the restarted child gets the SIGTERM before its signal handlers are
    installed; it must still drain and exit 0. ``backoff``: the child is dead, waiting for its
    restart; that earlier exit is not the stop's. Either way the supervisor exits 0."""
    supervisor = worker_process("--processes", "2", "--concurrency", "2", "--poll-interval", "0.2")
    started = lambda: re.findall(r"supervisor\.child_started.*?\bpid\W+(\d+)", supervisor.log())  # noqa: E731
    wait_until(lambda: len(started()) == 2, timeout=30, message="two children")
    wait_for_workers("default", 2)
    os.kill(int(started()[0]), signal.SIGKILL)
    if when == "starting":
        wait_until(lambda: len(started()) == 3, timeout=30, interval=0.005, message="the child's restart")
    else:
        wait_until(
            lambda: "supervisor.child_exited" in supervisor.log(),
            timeout=30,
            interval=0.005,
            message="the child's exit",
        )
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.log()
    log = supervisor.log()
    codes = "0,0" if when == "starting" else "0"
    assert re.search(rf"supervisor\.stopped codes={codes}$", log, re.MULTILINE), log
    # Every child that was running stopped by draining (the killed one never got to).
    assert log.count("worker.stopped") == len(codes.split(","))
    assert len(started()) == (3 if when == "starting" else 2)  # no restart after the stop


def test_a_signal_python_cannot_read_fails_its_waiter_for_good_and_nothing_else(worker_process):
    """Another SDK delivered the signal (a result row and a wake-up, by SQL) with a number
    Python can't read: the waiting activity fails at once, naming the result, instead of
    retrying into the same value; the worker goes on with other work."""
    from runnerq_django.spec.keys import checkpoint_id

    waiter = handlers.waits_for_signal.enqueue({}, max_attempts=3)
    worker_process(
        "--lease",
        "5",
        "--concurrency",
        "2",
        "--poll-interval",
        "0.2",
        env={
            "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
            "RUNNERQ_TEST_SETTINGS": '{"INLINE_WAIT_SECONDS": 0}',
        },
    )
    wait_for_status(waiter.id, "waiting")
    signal_id = checkpoint_id(waiter.id, "signal", "go")
    fetch(
        "INSERT INTO runnerq_results (activity_id, queue_name, state, data, owner_activity_id, step, serialization) "
        "VALUES (%s, 'default', 'Ok', '1e5000'::jsonb, %s, 'signal:go', 'json-v1')",
        [signal_id, waiter.id],
    )
    fetch(
        "UPDATE runnerq_activities SET status = 'pending', scheduled_at = NULL, waiting_result_id = NULL "
        "WHERE id = %s",
        [waiter.id],
    )
    wait_for_status(waiter.id, "failed", "dead_letter")
    [(status, retry_count, error)] = fetch(
        "SELECT status, retry_count, last_error FROM runnerq_activities WHERE id = %s", [waiter.id]
    )
    assert (status, retry_count) == ("failed", 0)
    assert f"result {signal_id}: number out of range for Python" in error
    assert handlers.echo.enqueue("after").result(timeout=30) == "after"
