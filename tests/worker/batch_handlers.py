"""Handlers of the batch tests (``runworker --import tests.worker.batch_handlers``; the testing
toolkit's tests import them too). Each call records one row per item in ``rq_test_runs``: ``what``
is ``batch:<call id>:<items in the call>``, so a test sees which items ran together, how often,
and in which process."""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import timedelta

from django.db import connection

from runnerq_django import BatchOptions, BatchResult, NonRetryableError, activity

_running = 0
_lock = threading.Lock()


def record(items) -> None:
    call = uuid.uuid4().hex[:12]
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO rq_test_runs (activity_id, what, attempt, pid) VALUES (%s, %s, %s, %s)",
            [(item.id, f"batch:{call}:{len(items)}", item.attempt, os.getpid()) for item in items],
        )


@activity(name="tb.echo", batch=BatchOptions(max_size=5, max_wait=timedelta(seconds=0.5)))
def echo(items):
    record(items)
    return [{"n": item.payload["n"], "attempt": item.attempt} for item in items]


@activity(name="tb.flaky", batch=BatchOptions(max_size=5, max_wait=0.5), retry_delay=0)
def flaky(items):
    """The items with ``fail_first`` fail on their first attempt, by name; the rest complete."""
    record(items)
    return BatchResult(
        results={item.id: {"n": item.payload["n"]} for item in items},
        failed={
            item.id: f"item {item.payload['n']} refused"
            for item in items
            if item.payload.get("fail_first") and item.attempt == 1
        },
    )


@activity(name="tb.poison", batch=BatchOptions(max_size=5, max_wait=0.5), retry_delay=0, max_attempts=2)
def poison(items):
    """``poison`` items always fail (``fatal`` ones for good, at once); the rest complete."""
    record(items)
    failed: dict = {}
    for item in items:
        if item.payload.get("fatal"):
            failed[item.id] = NonRetryableError("fatal item")
        elif item.payload.get("poison"):
            failed[item.id] = ValueError("poisoned item")
    return BatchResult(failed=failed)


@activity(name="tb.raises", batch=BatchOptions(max_size=5, max_wait=0.5), retry_delay=0)
def raises(items):
    """The whole batch fails while any item is on its first attempt."""
    record(items)
    if any(item.attempt == 1 for item in items):
        raise RuntimeError("the bulk API is down")
    return None


@activity(name="tb.limited", batch=BatchOptions(max_size=10, max_wait=0.3), concurrency=2)
def limited(items):
    """Under concurrency=2: never more than 2 activities of the type running, so batches of 2."""
    record(items)
    time.sleep(0.05)
    return [None] * len(items)


@activity(name="tb.gathering", batch=BatchOptions(max_size=10, max_wait=6))
def gathering(items):
    """A batch that gathers for 6 s: time for a test to cancel a member before the call."""
    record(items)
    return [item.payload for item in items]


@activity(name="tb.slow", batch=BatchOptions(max_size=3, max_wait=1), timeout=2, max_attempts=1)
def slow(items):
    """Runs past the items' 2 s timeout in Python bytecode (interruptible): every item times out."""
    record(items)
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        sum(range(200))
    return None


@activity(name="tb.trio", batch=BatchOptions(max_size=3, max_wait=20))
def trio(items):
    """Closes at 3 members (max_wait is long: the three run together)."""
    record(items)
    return [{"n": item.payload["n"]} for item in items]
