"""django.tasks ``@task`` functions on the RunnerQ backend (TASKS["default"] of the test project),
imported by the tests and by worker processes (``runworker --import tests.tasks_backend.tasks``)."""

from __future__ import annotations

import asyncio
import json
import os

try:  # Django 6+
    from django.tasks import task
    from django.tasks.signals import task_finished, task_started
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task
    from django_tasks.signals import task_finished, task_started

from runnerq_django import current_context


@task
def add(a, b):
    return a + b


@task(queue_name="reports", priority=60)
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs, "pid": os.getpid()}


@task
def fail(message):
    raise ValueError(message)


@task(takes_context=True)
def flaky(context, message):
    """Fails its first attempt, succeeds on the second."""
    if context.attempt == 1:
        raise RuntimeError(f"{message} on attempt 1")
    return context.attempt


@task
def not_json():
    return {"when": object()}


@task
async def async_double(n):
    await asyncio.sleep(0.01)
    return n * 2


@task(takes_context=True)
def with_context(context, x):
    """What a task sees of itself while it runs."""
    result = context.task_result
    return {
        "x": x,
        "attempt": context.attempt,
        "id": result.id,
        "status": str(result.status),
        "args": result.args,
        "worker_ids": result.worker_ids,
        "runnerq_id": str(current_context().id),
    }


@task(takes_context=True)
async def async_with_context(context, x):
    return {"x": x, "attempt": context.attempt, "id": context.task_result.id}


def _print_signal(signal_name):
    """A receiver printing what a worker process sends, one line the tests read from its log."""

    def receiver(sender, task_result, **kwargs):
        if task_result.task.module_path.endswith(".signalled"):
            fields = {
                "sender": sender.__name__,
                "id": task_result.id,
                "status": str(task_result.status),
                "attempt": task_result.attempts,
                "started": task_result.started_at is not None,
                "finished": task_result.finished_at is not None,
                "errors": [e.exception_class_path for e in task_result.errors],
                "return_value": task_result.return_value
                if task_result.is_finished and not task_result.errors
                else None,
            }
            print(f"SIGNAL {signal_name} {json.dumps(fields)}", flush=True)

    return receiver


_started = _print_signal("task_started")
_finished = _print_signal("task_finished")
task_started.connect(_started)
task_finished.connect(_finished)


@task(takes_context=True)
def signalled(context, fail_first):
    """Fails its first attempt when asked, then returns its attempt number."""
    if fail_first and context.attempt == 1:
        raise KeyError("first attempt")
    return context.attempt


@task(takes_context=True)
def with_metadata(context, steps):
    """Django's metadata proposal: progress in context.metadata, saved as it goes; a second
    attempt starts from what the first saved."""
    start = context.metadata.get("done", 0)
    for done in range(start + 1, steps + 1):
        context.metadata["done"] = done
        context.metadata["progress"] = done * 100 // steps
        context.save_metadata()
        if done == 2 and context.attempt == 1:
            raise RuntimeError("fails once, after step 2")
    context.metadata["finished"] = True  # saved when the task ends, unsaved here
    return context.attempt


@task(takes_context=True)
async def async_with_metadata(context, steps):
    for done in range(1, steps + 1):
        context.metadata["progress"] = done * 100 // steps
        await context.asave_metadata()
    return steps
