"""Django's task metadata proposal on the RunnerQ backend: ``supports_metadata``,
``context.metadata`` with ``save_metadata()`` / ``asave_metadata()``, ``TaskResult.metadata``,
and a ``"progress"`` key as the activity's progress; with a real worker process."""

from __future__ import annotations

from runnerq_django import get_handle
from runnerq_django.tasks_backend import TaskResultStatus
from runnerq_django.tasks_backend.metadata import NATIVE_CONTEXT_METADATA, RunnerQTaskContext
from tests.tasks_backend import tasks
from tests.tasks_backend.conftest import finished


def test_metadata_is_saved_carried_across_attempts_and_read_back(task_worker):
    backend = tasks.with_metadata.get_backend()
    assert backend.supports_metadata is True
    assert NATIVE_CONTEXT_METADATA or "metadata" in RunnerQTaskContext.__dataclass_fields__
    result = tasks.with_metadata.enqueue(4)
    proc = task_worker("-q", "default")
    assert finished(result, proc=proc, timeout=60).status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2  # the second attempt finished it ...
    fetched = backend.get_result(result.id)
    # ... starting from the metadata the first saved (done 2): steps 3 and 4, then the unsaved key at the end.
    assert fetched.metadata == {"done": 4, "progress": 100, "finished": True}
    progress = get_handle(result.id, queue="default").progress()
    assert (progress.done, progress.total) == (100, 100)
    names = [e.name for e in get_handle(result.id, queue="default").events()]
    assert names == ["django.tasks.metadata"] * 5  # 2 saves, 2 saves, the end's


def test_an_async_task_saves_metadata_without_waiting(task_worker):
    result = tasks.async_with_metadata.enqueue(3)
    proc = task_worker("-q", "default")
    assert finished(result, proc=proc, timeout=60).status == TaskResultStatus.SUCCESSFUL
    assert tasks.async_with_metadata.get_backend().get_result(result.id).metadata == {"progress": 100}
    assert get_handle(result.id, queue="default").progress().done == 100


def test_a_task_that_saved_nothing_has_empty_metadata(task_worker):
    result = tasks.add.enqueue(1, 2)
    proc = task_worker("-q", "default")
    assert finished(result, proc=proc).status == TaskResultStatus.SUCCESSFUL
    assert tasks.add.get_backend().get_result(result.id).metadata == {}
