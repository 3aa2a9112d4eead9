"""What one bad row or one fault must not do to other work, with real worker processes: a row
Python can't read fails alone; a worker frozen between its claim and its handlers starts none
of them once its lease is over; SIGTERM while the supervisor restarts a child ends cleanly."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time

import psycopg
import pytest

from runnerq_django import storage
from tests.helpers import wait_until
from tests.spec.test_superjson import nested_maps
from tests.storage.support import POISONS, poison
from tests.worker import handlers, slotted_handlers
from tests.worker.support import events_of, fetch, runs, wait_for_status, wait_for_workers

pytestmark = pytest.mark.slow

TYPED_MODE = {
    "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
    "RUNNERQ_TEST_SETTINGS": '{"SUPERJSON": "typed"}',
}


def write_superjson_input(activity_id, envelope) -> None:
    """The input as the TypeScript SDK writes it with its default serialization."""
    fetch(
        "UPDATE runnerq_inputs SET payload = %s::jsonb, serialization = 'superjson-v1' WHERE activity_id = %s",
        [json.dumps(envelope), activity_id],
    )


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
    resume: in every run at ``-v 2``, whose ``activity.started`` line (then written between the look
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
            timeout=120,
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


@pytest.mark.parametrize(
    "handler",
    [handlers.counted, slotted_handlers.counted_limited, slotted_handlers.counted_rated],
    ids=["usual", "limited", "rated"],
)
def test_in_typed_mode_a_superjson_row_too_deep_for_its_decoder_settles_alone(worker_process, handler):
    """The issue's rows, claimed with good ones by each claim path: a value about 700 deep with a
    SuperJSON annotation of the whole (its decoder copied the value, and raised RecursionError:
    the claim batch stayed processing until its lease ran out and good neighbours were
    dead-lettered unrun) runs as plain mode runs it; annotations nested past Python's limit fail
    that row alone, once, as plain mode fails JSON nested too deep; so does a path whose index
    is a digit but not an int ("²": its ValueError escaped the claim the same way)."""
    # First in claim order, so that each shares its claim batch with good rows.
    deep = handler.enqueue(None, max_attempts=2).id
    write_superjson_input(
        deep, {"json": json.loads("[" * 700 + "]" * 700), "meta": {"values": ["undefined"]}}
    )
    bad = {
        "input: nested too deep for Python": nested_maps(200),
        "input: $: SuperJSON annotates '²', which the value does not have": {
            "json": [1],
            "meta": {"values": {"²": ["undefined"]}},
        },
    }
    bad_ids = {}
    for reason, envelope in bad.items():
        bad_ids[reason] = handler.enqueue(None, max_attempts=2).id
        write_superjson_input(bad_ids[reason], envelope)
    good = handler.enqueue_many(list(range(8)), max_attempts=2)
    slotted = ("--import", "tests.worker.slotted_handlers")
    worker = worker_process(
        *slotted, "--lease", "2", "--concurrency", "4", "--poll-interval", "0.2", env=TYPED_MODE
    )

    assert [h.result(timeout=60) for h in good] == list(range(8))
    assert wait_for_status(deep, "completed", "failed", "dead_letter", timeout=30) == "completed"
    for activity_id in [h.id for h in good] + [deep]:
        assert [r[2] for r in runs("run", activity_id)] == [1]  # one run, the first attempt
        assert events_of(activity_id) == []
    for reason, activity_id in bad_ids.items():
        assert wait_for_status(activity_id, "failed", "dead_letter", timeout=30) == "failed"
        [(retry_count, error)] = fetch(
            "SELECT retry_count, last_error FROM runnerq_activities WHERE id = %s", [activity_id]
        )
        assert (retry_count, error) == (0, reason)
        assert events_of(activity_id) == ["Failed"] and runs(activity_id=activity_id) == []
    assert "dispatcher.claim_failed" not in worker.log()


def test_a_retry_delay_another_writer_stored_out_of_range_is_clamped_once(worker_process):
    """retry_delay_seconds and max_retry_delay_seconds of 2**63 - 1 (bigint columns; the spec
    bounds them below 2**31): the backoff's date could not be computed, every failure went
    unrecorded and the reaper ran the handler again, for ever. It retries once, after the
    protocol's longest delay (ten years); the good neighbour is not held up."""
    bad = handlers.counted_failure.enqueue("bad")
    fetch(
        "UPDATE runnerq_activities SET retry_delay_seconds = 9223372036854775807, "
        "max_retry_delay_seconds = 9223372036854775807 WHERE id = %s",
        [bad.id],
    )
    good = handlers.counted.enqueue("good")
    worker = worker_process("--lease", "2", "--concurrency", "2", "--poll-interval", "0.2")

    assert good.result(timeout=30) == "good"
    wait_for_status(bad.id, "retrying")
    time.sleep(5)  # two leases: a failure that went unrecorded would be reaped and run again by now
    [(status, retry_count, years)] = fetch(
        "SELECT status, retry_count, extract(epoch FROM scheduled_at - now()) / (365 * 86400) "
        "FROM runnerq_activities WHERE id = %s",
        [bad.id],
    )
    assert (status, retry_count) == ("retrying", 1) and 9.9 < years <= 10
    assert len(runs("run", bad.id)) == 1 and events_of(bad.id) == ["Retrying"]
    assert "fail_unrecorded" not in worker.log()


def test_a_retry_count_another_writer_stored_at_the_int4_maximum_stops_no_reap(worker_process):
    """retry_count 2**31 - 1 with unlimited attempts: one more was "integer out of range", so the
    failure went unrecorded and every reap of the queue failed, leaving the other expired leases
    processing for good. The count stays at the maximum; both rows are reaped and run."""
    from runnerq_django import storage

    bad = handlers.counted_failure.enqueue("bad")  # max_attempts=0: unlimited
    good = handlers.counted.enqueue("good")
    fetch("UPDATE runnerq_activities SET retry_count = 2147483647 WHERE id = %s", [bad.id])
    # A worker that died holding both: their 1 ms leases have run out.
    held = storage.claim(
        "default", types=["t.counted_failure", "t.counted"], limit=2, lease_ms=1, worker_id="gone"
    )
    assert sorted(a.id for a in held) == sorted([bad.id, good.id])
    worker = worker_process(
        "--lease",
        "2",
        "--poll-interval",
        "0.2",
        env={
            "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
            "RUNNERQ_TEST_SETTINGS": '{"REAPER_INTERVAL_SECONDS": 1}',
        },
    )

    assert good.result(timeout=30) == "good"
    wait_until(
        lambda: events_of(bad.id) == ["Requeued", "Retrying"], timeout=30, message="the bad row's failure"
    )
    time.sleep(5)  # two leases: a failure that went unrecorded would be reaped and run again by now
    assert fetch("SELECT status, retry_count FROM runnerq_activities WHERE id = %s", [bad.id]) == [
        ("retrying", 2147483647)
    ]
    assert len(runs("run", bad.id)) == 1 and events_of(bad.id) == ["Requeued", "Retrying"]
    assert "fail_unrecorded" not in worker.log() and "runnerq.reap.failed" not in worker.log()
