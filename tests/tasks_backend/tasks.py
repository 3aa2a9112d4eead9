"""django.tasks ``@task`` functions on the RunnerQ backend (TASKS["default"] of the test project),
imported by the tests and by worker processes (``runworker --import tests.tasks_backend.tasks``)."""

from __future__ import annotations

import asyncio
import os

try:  # Django 6+
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

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
