"""Enqueue the tour of the examples when a worker starts, once per database.

The idempotency key makes this safe with any number of workers and restarts: the first start
creates the tour, every later one finds it (``return_existing``). Set ``RUNNERQ_EXAMPLES=0`` to
skip it (the test suite does).
"""

from __future__ import annotations

import os

from django.dispatch import receiver

from runnerq_django.signals import worker_started
from runnerq_django.spec.statuses import is_terminal

TOUR_KEY = "examples-tour-v1"


@receiver(worker_started, dispatch_uid="examples.enqueue_tour")
def enqueue_tour(sender, worker, **kwargs) -> None:
    from testproject.examples.activities import QUEUE, tour

    if os.environ.get("RUNNERQ_EXAMPLES", "1") == "0" or QUEUE not in worker.options.queues:
        return
    if tour.name not in worker.types:
        return
    handle = tour.enqueue({}, idempotency_key=TOUR_KEY)
    if handle.created:
        print(
            f"[examples] the tour of the examples starts now (activity {handle.id}); "
            "watch the [example ...] lines, down to the tour's summary",
            flush=True,
        )
    else:
        status = handle.status()
        done = "already ran" if is_terminal(status) else "is already under way"
        print(
            f"[examples] the tour of the examples {done} in this database (activity {handle.id}, {status}); "
            "run it again with: python manage.py run_example tour",
            flush=True,
        )
