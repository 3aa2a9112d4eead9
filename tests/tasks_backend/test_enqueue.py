"""Enqueueing django tasks on the RunnerQ backend, and get_result, without a worker: the rows
written, the mappings (queue, priority, run_after), validation, transactions, missing results."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

try:
    from django.tasks.exceptions import TaskResultMismatch
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks.exceptions import TaskResultMismatch

from runnerq_django import cancel, enqueue, storage
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.tasks_backend import (
    InvalidTask,
    InvalidTaskArgument,
    InvalidTaskBackend,
    RunnerQTaskBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    runnerq_priority,
    task_status,
)
from tests.tasks_backend import tasks
from tests.tasks_backend.conftest import activity_row, count_activities

pytestmark = pytest.mark.django_db(transaction=True)


def backend():
    return tasks.add.get_backend()


def test_enqueue_writes_one_activity_with_a_json_v1_payload():
    result = tasks.add.enqueue(2, b=3)
    assert isinstance(result.task.get_backend(), RunnerQTaskBackend)
    assert result.status == TaskResultStatus.READY and result.backend == "default"
    assert result.args == [2] and result.kwargs == {"b": 3}
    assert uuid.UUID(result.id).version == 4
    row = activity_row(result.id)
    assert row["activity_type"] == "tests.tasks_backend.tasks.add"  # the task's module path
    assert row["queue_name"] == "default" and row["status"] == "pending"
    assert row["priority"] == 2  # Django's default 0 is RunnerQ's normal
    assert row["max_retries"] == 2  # TASKS["default"]["OPTIONS"]["MAX_ATTEMPTS"]
    assert json.loads(row["payload"]) == {"args": [2], "kwargs": {"b": 3}}
    assert row["payload_serialization"] == "json-v1"
    assert json.loads(row["metadata"]) == {
        "django_task.backend": "default",
        "django_task.priority": "0",
        "django_task.queue_name": "default",
    }


def test_queue_name_and_priority_are_mapped():
    echoed = tasks.echo.enqueue((1, 2), b"bytes", key=("a",))  # @task(queue_name="reports", priority=60)
    row = activity_row(echoed.id)
    assert (row["queue_name"], row["priority"]) == ("reports", 4)
    # Django's normalisation: tuples become lists, UTF-8 bytes text.
    assert json.loads(row["payload"]) == {"args": [[1, 2], "bytes"], "kwargs": {"key": ["a"]}}
    for django_priority, expected in [(-100, 1), (-1, 1), (0, 2), (1, 3), (49, 3), (50, 4), (100, 4)]:
        assert runnerq_priority(django_priority) == expected
        result = tasks.add.using(priority=django_priority).enqueue(1, 1)
        assert activity_row(result.id)["priority"] == expected
        assert backend().get_result(result.id).task.priority == django_priority  # kept in the metadata


def test_a_queue_map_gives_django_queue_names_a_runnerq_name():
    tasks_setting = {
        "default": {"BACKEND": "runnerq_django.tasks_backend.RunnerQTaskBackend", "QUEUES": []},
        "mapped": {
            "BACKEND": "runnerq_django.tasks_backend.RunnerQTaskBackend",
            "QUEUES": ["high-priority"],
            "OPTIONS": {"QUEUE_MAP": {"high-priority": "high"}, "MAX_ATTEMPTS": 5, "TIMEOUT": 60},
        },
    }
    with override_settings(TASKS=tasks_setting):
        result = tasks.add.using(backend="mapped", queue_name="high-priority").enqueue(1, 2)
        row = activity_row(result.id)
        assert (row["queue_name"], row["max_retries"], row["timeout_seconds"]) == ("high", 5, 60)
        fetched = result.task.get_backend().get_result(result.id)
        assert (fetched.backend, fetched.task.backend, fetched.task.queue_name) == (
            "mapped",
            "mapped",
            "high-priority",
        )


@pytest.mark.parametrize("name", ["bad-name", "q" * 49, "1abc", "with space", ""])
def test_queue_names_runnerq_cannot_use_are_refused(name):
    with pytest.raises(InvalidTask, match="queue_name") as caught:
        tasks.add.using(queue_name=name)
    assert "1-48 characters" in str(caught.value)
    assert count_activities() == 0


def test_backend_options_are_validated_naming_the_option():
    with pytest.raises(InvalidTaskBackend, match=r"\['QUEUES'\] names 'bad-name'.*QUEUE_MAP"):
        RunnerQTaskBackend("x", {"QUEUES": ["bad-name"]})
    with pytest.raises(InvalidTaskBackend, match=r"\['QUEUE_MAP'\]: .*'also-bad'"):
        RunnerQTaskBackend("x", {"QUEUES": [], "OPTIONS": {"QUEUE_MAP": {"a": "also-bad"}}})
    with pytest.raises(InvalidTaskBackend, match=r"\['MAX_ATTEMPTS'\]"):
        RunnerQTaskBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": -1}})
    with pytest.raises(InvalidTaskBackend, match="unknown keys \\['RETRIES'\\]"):
        RunnerQTaskBackend("x", {"OPTIONS": {"RETRIES": 3}})


def test_arguments_that_are_not_json_are_refused_naming_the_field():
    with pytest.raises(InvalidArgument) as caught:
        tasks.add.enqueue(1, object())
    assert caught.value.field == "args[1]" and "JSON" in caught.value.message
    assert str(caught.value).startswith("args[1]: must be JSON-serializable")
    with pytest.raises(InvalidArgument) as caught:
        tasks.add.enqueue(1, b=float("nan"))
    assert caught.value.field == "kwargs['b']"
    with pytest.raises(InvalidArgument) as caught:
        tasks.add.enqueue({"when": timezone.now()}, 2)
    assert caught.value.field == "args[0]"
    assert count_activities() == 0


def test_enqueue_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = tasks.add.enqueue(1, 2)
        assert count_activities() == 1  # written in the transaction ...
        raise RuntimeError("roll back")
    assert count_activities() == 0  # ... and gone with it
    assert activity_row(rolled_back.id) == {}
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result(rolled_back.id)
    with transaction.atomic():
        committed = tasks.add.enqueue(3, 4)
    assert activity_row(committed.id)["status"] == "pending"


def test_run_after_schedules_the_activity():
    at = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    result = tasks.add.using(run_after=at).enqueue(1, 2)
    row = activity_row(result.id)
    assert row["status"] == "scheduled"
    assert abs((row["scheduled_at"] - at).total_seconds()) < 2
    fetched = backend().get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.task.run_after == at


def test_get_result_of_a_task_no_worker_ran_yet():
    result = tasks.echo.enqueue(1, word="two")
    fetched = backend().get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and not fetched.is_finished
    assert fetched.task.func is tasks.echo.func
    assert (fetched.task.queue_name, fetched.task.priority) == ("reports", 60)
    assert fetched.args == [1] and fetched.kwargs == {"word": "two"}
    assert fetched.enqueued_at == activity_row(result.id)["created_at"]
    assert fetched.started_at is None and fetched.finished_at is None
    assert fetched.errors == [] and fetched.worker_ids == [] and fetched.attempts == 0
    with pytest.raises(ValueError, match="not finished"):
        _ = fetched.return_value
    assert tasks.echo.get_result(result.id).id == result.id  # Task.get_result checks the function
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tasks.add.get_result(result.id)


def test_get_result_of_a_cancelled_task_is_failed_with_the_reason():
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    cancel(result.id, queue="default", reason="not needed any more")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
    assert len(result.errors) == 1 and "not needed any more" in result.errors[0].traceback


def test_get_result_of_unknown_ids_and_plain_activities():
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result(str(uuid.uuid4()))
    with pytest.raises(TaskResultDoesNotExist, match="UUID"):
        backend().get_result("not-a-uuid")
    handle = enqueue("SomeGoType", {"n": 1})  # an activity, not a django task
    with pytest.raises(TaskResultDoesNotExist, match="not enqueued as a django task"):
        backend().get_result(str(handle.id))


def test_get_result_never_imports_the_module_a_row_names():
    """The stored type is data: only tasks this project defines are resolved, so a forged row
    cannot make the web process import an arbitrary module."""
    import sys

    from django.db import connection

    result = tasks.add.enqueue(1, 2)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runnerq_activities SET activity_type = 'tests.tasks_backend.planted.fn' WHERE id = %s",
            [result.id],
        )
    sys.modules.pop("tests.tasks_backend.planted", None)
    with pytest.raises(TaskResultDoesNotExist, match="is not a django task of this project"):
        backend().get_result(result.id)
    assert "tests.tasks_backend.planted" not in sys.modules


def test_status_mapping():
    expected = {
        "pending": "READY",
        "scheduled": "READY",
        "retrying": "READY",
        "processing": "RUNNING",
        "waiting": "RUNNING",
        "completed": "SUCCESSFUL",
        "failed": "FAILED",
        "dead_letter": "FAILED",
        "cancelled": "FAILED",
    }
    assert {status: task_status(status).value for status in expected} == expected


def test_the_backend_declares_what_it_supports():
    assert (
        RunnerQTaskBackend.supports_defer,
        RunnerQTaskBackend.supports_async_task,
        RunnerQTaskBackend.supports_get_result,
        RunnerQTaskBackend.supports_priority,
    ) == (True, True, True, True)
    assert list(backend().check()) == []


def test_the_enqueued_result_equals_get_result_of_its_id():
    """Django's test_get_result: the TaskResult enqueue() returns is the one get_result reads,
    enqueued_at included (the row's created_at, not the Python clock before the INSERT)."""
    result = tasks.echo.enqueue(1, word="two")
    fetched = backend().get_result(result.id)
    assert result.enqueued_at == activity_row(result.id)["created_at"]
    assert fetched == result
    with transaction.atomic():  # in the caller's transaction too
        inside = tasks.add.enqueue(1, 2)
        assert backend().get_result(inside.id) == inside


def test_arguments_that_are_not_json_raise_a_type_error_as_django_backends_do():
    """Code written against django.tasks catches TypeError (Django's normalize_json)."""
    for args, kwargs, field in [
        ((1, object()), {}, "args[1]"),
        ((1,), {"b": float("nan")}, "kwargs['b']"),
        (({"when": timezone.now()}, 2), {}, "args[0]"),
    ]:
        with pytest.raises(TypeError, match=re.escape(field)) as caught:
            tasks.add.enqueue(*args, **kwargs)
        assert isinstance(caught.value, InvalidTaskArgument) and caught.value.field == field
    assert count_activities() == 0


def test_a_run_after_already_past_is_kept_as_the_due_time():
    """Tasks run in run_after order: an overdue run_after is due at its own time, not at the
    enqueue's, so a task enqueued late but due early is claimed before one due since."""
    on_time = tasks.add.enqueue(0, 0)  # due at its created_at
    late_at = timezone.now()  # after on_time's enqueue
    early_at = late_at - timedelta(seconds=10)  # before it
    late = tasks.add.using(run_after=late_at).enqueue(1, 1)
    early = tasks.add.using(run_after=early_at).enqueue(2, 2)
    row = activity_row(early.id)
    assert (row["status"], row["scheduled_at"]) == ("scheduled", early_at)
    assert backend().get_result(early.id) == early  # READY, its run_after kept
    claimed = [str(c.id) for c in storage.claim("default", limit=3, lease_ms=60000)]
    assert claimed == [early.id, on_time.id, late.id]


def test_the_check_names_priorities_that_fold_onto_one_runnerq_level():
    tasks_setting = {
        "default": {"BACKEND": "runnerq_django.tasks_backend.RunnerQTaskBackend", "QUEUES": []},
        "folding": {"BACKEND": "runnerq_django.tasks_backend.RunnerQTaskBackend", "QUEUES": []},
    }
    with override_settings(TASKS=tasks_setting):
        from tests.tasks_backend import folded

        messages = folded.urgent.get_backend().check()
        assert [m.id for m in messages] == ["runnerq.W020"]
        (message,) = messages
        assert (
            "priorities 2 (tests.tasks_backend.folded.routine), 10 (tests.tasks_backend.folded.urgent)"
            in (message.msg)
        )
        assert "RunnerQ priority 3 (Django 1..49)" in message.msg and "-5" not in message.msg
        assert "-100..-1 -> 1, 0 -> 2, 1..49 -> 3, 50..100 -> 4" in message.hint
        assert list(tasks.add.get_backend().check()) == []  # the default backend's tasks don't fold
