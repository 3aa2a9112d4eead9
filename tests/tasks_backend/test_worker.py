"""django tasks run by real ``manage.py runworker`` processes; ``get_result`` reads the outcome
from the database (the worker's word is never taken for it)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runnerq_django.tasks_backend import TaskResultStatus
from tests.helpers import wait_until
from tests.tasks_backend import tasks
from tests.tasks_backend.conftest import activity_row, finished

pytestmark = pytest.mark.slow


def test_the_worker_runs_tasks_and_get_result_reports_success(task_worker):
    added = tasks.add.enqueue(2, 3)
    echoed = tasks.echo.enqueue(1, "two", three=3)  # queue "reports"
    doubled = tasks.async_double.enqueue(21)
    seen = tasks.with_context.enqueue("x")
    seen_async = tasks.async_with_context.enqueue(7)
    proc = task_worker("-q", "default,reports")

    assert finished(added, proc=proc).status == TaskResultStatus.SUCCESSFUL
    assert added.return_value == 5
    assert added.errors == [] and added.attempts == 1 and len(added.worker_ids[0]) > 0
    assert added.enqueued_at <= added.started_at <= added.finished_at
    assert activity_row(added.id)["status"] == "completed"

    assert finished(echoed, proc=proc).status == TaskResultStatus.SUCCESSFUL
    assert echoed.return_value == {"args": [1, "two"], "kwargs": {"three": 3}, "pid": proc.pid}
    assert finished(doubled, proc=proc).return_value == 42  # an async def task

    context = finished(seen, proc=proc).return_value
    assert context == {
        "x": "x",
        "attempt": 1,
        "id": seen.id,
        "status": "RUNNING",
        "args": ["x"],
        "worker_ids": seen.worker_ids,
        "runnerq_id": seen.id,
    }
    assert finished(seen_async, proc=proc).return_value == {"x": 7, "attempt": 1, "id": seen_async.id}

    fetched = tasks.add.get_backend().get_result(added.id)  # from the id alone, as another process would
    assert (fetched.status, fetched.return_value, fetched.worker_ids) == (added.status, 5, added.worker_ids)


def test_failures_are_reported_with_the_stored_errors(task_worker):
    failing = tasks.fail.enqueue("boom")
    flaky = tasks.flaky.enqueue("hiccup")
    unstorable = tasks.not_json.enqueue()
    proc = task_worker()

    # An exception is retried (TASKS["default"]["OPTIONS"]["MAX_ATTEMPTS"] = 2), then FAILED.
    assert finished(failing, proc=proc).status == TaskResultStatus.FAILED
    assert [e.exception_class for e in failing.errors] == [ValueError, ValueError]
    assert all("ValueError: boom" in e.traceback and "in fail" in e.traceback for e in failing.errors)
    assert failing.attempts == 2 and failing.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        _ = failing.return_value
    assert activity_row(failing.id)["status"] == "dead_letter"

    assert finished(flaky, proc=proc).status == TaskResultStatus.SUCCESSFUL
    assert flaky.return_value == 2  # the second attempt's context.attempt
    assert [e.exception_class for e in flaky.errors] == [RuntimeError]
    assert "hiccup on attempt 1" in flaky.errors[0].traceback and flaky.attempts == 2

    # A return value that isn't JSON can't be stored: failed at once, not retried, with the
    # TypeError Django's normalize_json raised (what Django's own backends record).
    assert finished(unstorable, proc=proc).status == TaskResultStatus.FAILED
    assert [e.exception_class for e in unstorable.errors] == [TypeError]
    assert "Unsupported type" in unstorable.errors[0].traceback
    assert activity_row(unstorable.id)["status"] == "failed"


def test_run_after_defers_the_task(task_worker):
    proc = task_worker()
    assert finished(tasks.add.enqueue(0, 0), proc=proc).return_value == 0  # the worker is up
    run_after = timezone.now() + timedelta(seconds=2)
    deferred = tasks.add.using(run_after=run_after).enqueue(1, 1)
    time.sleep(1)
    deferred.refresh()
    assert deferred.status == TaskResultStatus.READY and activity_row(deferred.id)["status"] == "scheduled"
    assert finished(deferred, proc=proc).return_value == 2
    assert deferred.started_at >= run_after


def test_a_worker_runs_a_task_named_by_module_path_without_importing_it(task_worker):
    """``runworker -t <module path>``: the backend's resolver imports the task; other types on the
    queue (here another task) are left alone."""
    added = tasks.add.enqueue(4, 5)
    other = tasks.fail.enqueue("not for this worker")
    proc = task_worker("-t", "tests.tasks_backend.tasks.add", imports=False)
    assert finished(added, proc=proc).return_value == 9
    time.sleep(0.5)  # a few polls
    assert activity_row(other.id)["status"] == "pending"
    wait_until(
        lambda: "activity_types=tests.tasks_backend.tasks.add" in proc.log(),
        timeout=5,
        message="the worker's start line",
    )


def test_the_worker_sends_task_started_and_task_finished(task_worker):
    """Django's task log lines and users' hooks are receivers of these signals: each attempt
    sends task_started (RUNNING) and task_finished (SUCCESSFUL with the return value, or FAILED
    with the attempt's error), as Django's backends do."""
    ok = tasks.signalled.enqueue(False)
    retried = tasks.signalled.enqueue(True)
    proc = task_worker()
    assert finished(ok, proc=proc).return_value == 1
    assert finished(retried, proc=proc).return_value == 2

    def sent(result):
        lines = [line.split(" ", 2)[1:] for line in proc.log().splitlines() if line.startswith("SIGNAL ")]
        return [
            (name, fields)
            for name, fields in ((n, json.loads(f)) for n, f in lines)
            if fields["id"] == result.id
        ]

    wait_until(lambda: len(sent(retried)) == 4, timeout=5, message="four signals of the retried task")
    running = {"sender": "RunnerQTaskBackend", "id": ok.id, "status": "RUNNING", "started": True}
    assert sent(ok) == [
        ("task_started", {**running, "attempt": 1, "finished": False, "errors": [], "return_value": None}),
        (
            "task_finished",
            {
                **running,
                "status": "SUCCESSFUL",
                "attempt": 1,
                "finished": True,
                "errors": [],
                "return_value": 1,
            },
        ),
    ]
    running["id"] = retried.id
    assert sent(retried) == [
        ("task_started", {**running, "attempt": 1, "finished": False, "errors": [], "return_value": None}),
        (
            "task_finished",
            {
                **running,
                "status": "FAILED",
                "attempt": 1,
                "finished": True,
                "errors": ["builtins.KeyError"],
                "return_value": None,
            },
        ),
        (
            "task_started",
            {
                **running,
                "attempt": 2,
                "finished": False,
                "errors": ["builtins.KeyError"],
                "return_value": None,
            },
        ),
        (
            "task_finished",
            {
                **running,
                "status": "SUCCESSFUL",
                "attempt": 2,
                "finished": True,
                "errors": ["builtins.KeyError"],
                "return_value": None,
            },
        ),
    ]


def test_overdue_tasks_run_in_run_after_order(task_worker):
    on_time = tasks.echo.using(queue_name="default", priority=0).enqueue("on_time")
    late_at = timezone.now()
    late = tasks.echo.using(queue_name="default", priority=0, run_after=late_at).enqueue("late")
    early = tasks.echo.using(
        queue_name="default", priority=0, run_after=late_at - timedelta(seconds=10)
    ).enqueue("early")
    proc = task_worker("--concurrency", "1")
    ran = sorted((finished(r, proc=proc).started_at, r.args[0]) for r in (on_time, late, early))
    assert [name for _, name in ran] == ["early", "on_time", "late"]
