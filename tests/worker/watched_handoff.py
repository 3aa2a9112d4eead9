"""``runworker --import tests.worker.watched_handoff``: the test handlers, on a worker that uses
the watched hand-off (``ExecutorPool``) whatever the Python, so that the tests run it on the
Pythons that keep the queue's."""

from __future__ import annotations

from runnerq_django.worker import executor, runtime
from tests.worker import handlers  # noqa: F401  (registers the handlers)


def _watched(size, run, **options):
    return executor.ExecutorPool(size, run, **options)


runtime.executor_pool = _watched
