"""Errors nobody foresaw, in the worker's own code around a handler: every attempt is settled,
none stays claimed with its lease renewed for as long as the worker lives."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.test import override_settings

from runnerq_django import ActivityFailed
from tests.worker import handlers
from tests.worker.support import row_of

FAST_LEASE = {"lease_seconds": 1.2, "heartbeat_seconds": 0.3}


def _failure(handle) -> ActivityFailed:
    with pytest.raises(ActivityFailed) as failed:
        handle.result(timeout=15)
    return failed.value


def _settled(instance, handle, *, status: str) -> dict:
    """The row is finished and the worker holds nothing, even a lease later."""
    time.sleep(
        2 * FAST_LEASE["lease_seconds"]
    )  # a held claim would be renewed, a dropped one reaped meanwhile
    assert len(instance.attempts) == 0
    row = row_of(handle.id)
    assert row["status"] == status and row["current_worker_id"] is None and row["retry_count"] == 0
    return row


def test_a_result_utf8_cannot_encode_fails_the_activity(worker):
    instance = worker(**FAST_LEASE)
    handle = handlers.returns_lone_surrogate.enqueue(None)
    failure = _failure(handle)
    assert failure.kind == "non_retryable"
    assert (
        "return value can't be stored: result: must be valid Unicode" in failure.error
        and "U+D83D" in failure.error
    )
    _settled(instance, handle, status="failed")
    assert handlers.CALLS["returns_lone_surrogate"] == 1  # max_attempts=0, yet not run again


def test_a_result_nested_too_deep_fails_the_activity_naming_the_limit(worker):
    instance = worker(**FAST_LEASE)
    handle = handlers.returns_too_deep.enqueue(None)
    failure = _failure(handle)
    assert failure.kind == "non_retryable"
    assert (
        "return value can't be stored: result: must be nested at most 64 arrays/objects deep "
        "(RUNNERQ['MAX_JSON_DEPTH'])"
    ) in failure.error
    _settled(instance, handle, status="failed")


def test_a_result_over_the_limit_fails_the_activity_naming_the_limit_and_the_setting(worker):
    instance = worker(**FAST_LEASE)
    too_large = handlers.returns_sized.enqueue(2 * 1024 * 1024)  # a 2 MiB result used to be stored
    failure = _failure(too_large)
    assert failure.kind == "non_retryable"
    assert failure.error == (
        "the handler's return value can't be stored: result: JSON text must be at most 1048576 bytes "
        "(RUNNERQ['MAX_RESULT_BYTES']), got 2097154"
    )
    _settled(instance, too_large, status="failed")
    assert handlers.CALLS["returns_sized"] == 1  # not retried: it would return as much again
    at_the_limit = handlers.returns_sized.enqueue(1024 * 1024 - 2)
    assert at_the_limit.result(timeout=15) == "x" * (1024 * 1024 - 2)


@override_settings(RUNNERQ={**settings.RUNNERQ, "MAX_RESULT_BYTES": 3 * 1024 * 1024})
def test_the_result_limit_is_a_setting(worker):
    worker(**FAST_LEASE)
    assert len(handlers.returns_sized.enqueue(2 * 1024 * 1024).result(timeout=15)) == 2 * 1024 * 1024


def test_an_unexpected_error_in_the_outcome_path_is_an_internal_error(worker):
    instance = worker(**FAST_LEASE)
    handle = handlers.result_breaks_the_check.enqueue(None)
    failure = _failure(handle)
    assert failure.kind == "non_retryable"
    assert failure.error == "internal error: RuntimeError: the mapping's source went away"
    assert "tests/worker/handlers.py" in failure.data["failure"]["traceback"]  # where it went wrong
    _settled(instance, handle, status="failed")
    assert handlers.CALLS["result_breaks_the_check"] == 1
    # The executor thread survived and its slot came back: the pool still runs everything.
    assert [handlers.echo.enqueue(n).result(timeout=15) for n in range(6)] == list(range(6))


def test_a_completion_the_ack_writer_cannot_store_fails_alone(worker):
    instance = worker(**FAST_LEASE)
    bad = handlers.result_breaks_the_write.enqueue(None)
    good = handlers.echo.enqueue_many(list(range(8)))  # written in the same batches, or next to it
    assert [h.result(timeout=15) for h in good] == list(range(8))
    failure = _failure(bad)
    assert failure.kind == "non_retryable"
    assert failure.error.startswith("internal error: the result could not be recorded: RuntimeError")
    _settled(instance, bad, status="failed")
    assert handlers.CALLS["result_breaks_the_write"] == 1


def test_an_exception_message_postgres_cannot_store_is_still_recorded(worker):
    instance = worker(**FAST_LEASE)
    handle = handlers.unstorable_error.enqueue(None)
    failure = _failure(handle)
    assert failure.kind == "dead_letter"  # max_attempts=1: recorded as the ordinary failure it is
    assert failure.error == "RuntimeError: a NUL \\x00 and a lone surrogate \\ud83d"
    _settled(instance, handle, status="dead_letter")
