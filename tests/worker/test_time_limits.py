"""Soft and hard time limits with real worker processes (docs/how-to/time-limits.md).

Soft: the handler is told (``SoftTimeLimitExceeded`` in a sync handler, cancellation of an async
one) and may clean up. Hard: an ``isolation="process"`` handler blocked where nothing reaches it
(libc ``sleep()`` through ctypes, ``select`` on a socket that never answers) is killed at its
timeout; the attempt ends as a thread's timeout does and the worker keeps serving."""

from __future__ import annotations

import os
import signal
import time

import pytest

from runnerq_django import ActivityFailed, activity, cancel
from runnerq_django.activities.registry import registry
from runnerq_django.storage.errors import InvalidArgument
from tests.helpers import wait_until
from tests.worker import limit_handlers as lh
from tests.worker.support import events_of, fetch, row_of, runs

FAST = ("--import", "tests.worker.limit_handlers", "--poll-interval", "0.2")


def whats(handle) -> list[str]:
    return [r[1] for r in runs(activity_id=handle.id)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# soft limits -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_soft_limits_tell_the_handler_in_threads_tasks_and_children(worker_process):
    caught = lh.soft_python.enqueue(None)
    reraised = lh.soft_reraise.enqueue(None)
    cancelled = lh.soft_async.enqueue(None)
    signalled = lh.soft_process_select.enqueue(None)
    began = time.monotonic()
    worker_process(*FAST, "--concurrency", "4")

    # Caught and returned: the attempt succeeds with what the cleanup returned.
    assert caught.result(timeout=30) == {"cleaned": True}
    assert whats(caught) == ["start", "cleanup"]
    # A signal ends the child's select() on a silent socket at the soft limit, not after 7 s.
    assert signalled.result(timeout=30) == {"cleaned": True}
    assert whats(signalled) == ["start", "cleanup"]
    # Let through: a retryable timeout (max_attempts=1, so the last attempt: dead letter).
    for handle in (reraised, cancelled):
        with pytest.raises(ActivityFailed) as failed:
            handle.result(timeout=30)
        assert failed.value.kind == "dead_letter"
        assert (
            "SoftTimeLimitExceeded: the attempt ran longer than its soft timeout of 1s" in failed.value.error
        )
        assert "cleanup" in whats(handle) and "end" not in whats(handle)
    assert time.monotonic() - began < 12  # each was told at 1 s, not after its 7 s wait


@pytest.mark.slow
def test_a_threads_soft_limit_waits_for_a_blocking_c_call(worker_process):
    handle = lh.soft_thread_c_call.enqueue(None)
    worker_process(*FAST)
    assert handle.result(timeout=30) == {"cleaned": True}
    # Due at 1 s, told only once the 3 s C call returned (before the next line's bytecode).
    assert whats(handle) == ["start", "cleanup"]
    ((told_after,),) = fetch(
        "SELECT extract(epoch FROM max(at) - min(at)) FROM rq_test_runs WHERE activity_id = %s", [handle.id]
    )
    assert told_after >= 2.9


# hard limits -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_hard_limit_kills_a_child_blocked_in_c_and_the_retry_runs(worker_process):
    handle = lh.hard_c_sleep.enqueue(None)
    proc = worker_process(*FAST, "--concurrency", "1")
    began = time.monotonic()
    wait_until(lambda: runs("start", handle.id), timeout=30, message="the first attempt to start")
    child = runs("start", handle.id)[0][3]
    assert child != proc.pid  # it ran in a child process
    assert handle.result(timeout=30) == {"attempt": 2}
    assert time.monotonic() - began < 10  # not the 15 s C call
    assert not alive(child)  # the work was really stopped, not left running
    assert [r[2] for r in runs("start", handle.id)] == [1, 2] and runs("end", handle.id) == []
    row = row_of(handle.id)
    assert row["status"] == "completed" and row["retry_count"] == 1
    assert "ActivityTimedOut: the attempt ran longer than its timeout of 2s" in row["last_error"]


@pytest.mark.slow
def test_the_killed_attempt_has_a_thread_timeouts_events_and_the_worker_keeps_serving(worker_process):
    killed = lh.hard_select.enqueue(None)
    proc = worker_process(*FAST, "--concurrency", "1")
    wait_until(lambda: runs("start", killed.id), timeout=30, message="the blocked handler to start")
    child = runs("start", killed.id)[0][3]
    with pytest.raises(ActivityFailed) as failed:
        killed.result(timeout=30)
    assert failed.value.kind == "dead_letter"
    assert "timeout of 2s" in failed.value.error
    assert not alive(child)
    # One thread, and it is free: the next activities run at once, each in a new child.
    began = time.monotonic()
    after = [lh.process_echo.enqueue(n) for n in (1, 2)]
    assert [h.result(timeout=15) for h in after] == [
        {"echo": 1, "step": 2},
        {"echo": 2, "step": 4},
    ]
    assert time.monotonic() - began < 8  # not behind the 15 s select
    pids = {r[3] for h in after for r in runs("run", h.id)}
    assert len(pids) == 2 and proc.pid not in pids
    # The same events as a thread's timeout: compare with one (same options, a 4 s C call).
    threaded = lh.thread_c_sleep.enqueue(None, max_attempts=1)
    with pytest.raises(ActivityFailed):
        threaded.result(timeout=30)
    assert events_of(killed.id) == events_of(threaded.id)
    assert row_of(killed.id)["status"] == row_of(threaded.id)["status"] == "dead_letter"


@pytest.mark.slow
def test_a_handler_that_swallows_its_soft_limit_is_killed_at_the_hard_one(worker_process):
    handle = lh.hard_ignores_soft.enqueue(None)
    worker_process(*FAST)
    began = time.monotonic()
    with pytest.raises(ActivityFailed) as failed:
        handle.result(timeout=30)
    assert time.monotonic() - began < 10
    assert "timeout of 4s" in failed.value.error
    assert whats(handle) == ["start", "ignored"]
    assert not alive(runs("start", handle.id)[0][3])


@pytest.mark.slow
def test_a_thread_times_out_but_its_c_call_keeps_the_thread(worker_process):
    """What the hard limit is for: the thread mode fails the attempt at its timeout, yet the
    thread is busy until the C call returns, and the next activity waits for it."""
    handle = lh.thread_c_sleep.enqueue(None)
    worker_process(*FAST, "--concurrency", "1")
    wait_until(lambda: runs("start", handle.id), timeout=30, message="the handler to start")
    began = time.monotonic()
    assert handle.result(timeout=30) == {"attempt": 2}
    assert time.monotonic() - began >= 3  # the retry waited for the 4 s C call's thread
    # The timed-out attempt's Python after the C call never ran: the interrupt landed there.
    assert whats(handle) == ["start", "start"]


@pytest.mark.slow
def test_child_failures_and_durable_sleeps_are_recorded_as_a_threads(worker_process):
    failing = lh.process_fails.enqueue("input")
    sleeping = lh.process_sleeps.enqueue(None)
    worker_process(*FAST)
    with pytest.raises(ActivityFailed) as failed:
        failing.result(timeout=30)
    assert failed.value.error.startswith("ValueError: bad input")
    failure = failed.value.failure
    assert failure is not None and failure.name == "ValueError" and "process_fails" in failure.stack
    assert sleeping.result(timeout=30) == {"woke": True}
    assert len(runs("run", sleeping.id)) == 2  # parked once, woken, replayed past the sleep
    assert "Yielded" in events_of(sleeping.id)


@pytest.mark.slow
def test_shutdown_and_cancel_kill_a_blocked_child(worker_process):
    """A release at shutdown (after the grace) and a cancellation (the lease renewal misses)
    stop the child too: it never runs on once its work may be handed to another worker."""
    released = lh.process_blocks.enqueue(None)
    proc = worker_process(*FAST, "--shutdown-grace", "1", "--lease", "2")
    wait_until(lambda: runs("start", released.id), timeout=30, message="the handler to start")
    child = runs("start", released.id)[0][3]
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0 and time.monotonic() - began < 10  # not the 60 s C call
    assert not alive(child)
    row = row_of(released.id)
    assert row["status"] == "pending" and row["retry_count"] == 0  # released, no attempt counted

    proc = worker_process(*FAST, "--lease", "2")
    wait_until(lambda: len(runs("start", released.id)) == 2, timeout=30, message="the retaken attempt")
    child = runs("start", released.id)[1][3]
    began = time.monotonic()
    cancel(released)
    wait_until(lambda: not alive(child), timeout=10, message="the cancelled handler's child to die")
    assert time.monotonic() - began < 8
    assert row_of(released.id)["status"] == "cancelled" and runs("end", released.id) == []
    assert lh.process_echo.enqueue(5).result(timeout=15)["echo"] == 5  # and the worker serves on


def test_an_in_process_worker_runs_process_mode_handlers_on_its_database(worker):
    """The child uses the worker's database even when its name was changed at run time (here:
    pytest-django's test database), not the one of the settings module."""
    worker(concurrency=1)
    handle = lh.process_echo.enqueue(21)
    assert handle.result(timeout=30) == {"echo": 21, "step": 42}
    ((_, what, attempt, pid),) = runs(activity_id=handle.id)
    assert (what, attempt) == ("run", 1) and pid != os.getpid()


def test_the_testing_worker_runs_process_mode_handlers_in_a_child(runnerq_worker, runs_table):
    """runnerq_django.testing's worker: the child's durable sleep parks, and fast-forward (the
    activity's clock, which the child is given) wakes it."""
    handle = lh.process_sleeps.enqueue(None)
    ran = runnerq_worker.run_until_idle(fast_forward=True)
    assert [r.outcome for r in ran] == ["waiting", "completed"]
    assert handle.result(timeout=0) == {"woke": True}
    pids = [r[3] for r in runs("run", handle.id)]
    assert len(pids) == 2 and os.getpid() not in pids


# options -----------------------------------------------------------------------------------------


def test_the_limit_options_are_checked_at_the_decorator():
    with pytest.raises(InvalidArgument, match=r"soft_timeout.*shorter than the timeout \(5s\)"):
        activity(name="t.bad_soft", timeout=5, soft_timeout=5)(lambda payload: None)
    with pytest.raises(InvalidArgument, match=r"isolation.*thread, process.*'fork'"):
        activity(name="t.bad_isolation", isolation="fork")(lambda payload: None)

    async def handler(payload):
        return None

    with pytest.raises(InvalidArgument, match=r"isolation.*async"):
        activity(name="t.bad_async", isolation="process")(handler)
    assert "t.bad_soft" not in registry and "t.bad_async" not in registry
    options = lh.soft_process_select.options
    assert (options.soft_timeout_seconds, options.isolation, options.timeout_seconds) == (2, "process", 8)
    with pytest.raises(InvalidArgument, match=r"soft_timeout: is set per activity type, not per enqueue"):
        lh.process_echo.using(soft_timeout=1)  # type: ignore[call-arg]
