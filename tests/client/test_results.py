"""Handles and results: waiting (LISTEN and polling), failures carrying the stored error,
timeouts, handles rebuilt from an id in another thread, async waiting."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.test import override_settings

from runnerq_django import ActivityFailed, ResultTimeout, get_handle
from tests.worker import handlers


def test_result_of_sync_and_async_handlers(worker):
    worker()
    assert handlers.echo.enqueue({"x": 1}).result(timeout=10) == {"x": 1}
    assert handlers.async_echo.enqueue([1, 2]).result(timeout=10) == {"async": [1, 2]}
    assert handlers.noop.enqueue(None).result(timeout=10) is None  # a null result is a result


def test_failures_raise_with_the_stored_error(worker):
    worker()
    with pytest.raises(ActivityFailed) as failed:
        handlers.fail_non_retryable.enqueue("order-7").result(timeout=10)
    assert failed.value.kind == "non_retryable"
    assert "bad input: order-7" in failed.value.error
    with pytest.raises(ActivityFailed) as dead:
        handlers.always_fails.enqueue(None).result(timeout=10)
    assert dead.value.kind == "dead_letter" and "RuntimeError: boom" in dead.value.error
    with pytest.raises(ActivityFailed, match="can't be stored"):
        handlers.bad_result.enqueue(None).result(timeout=10)


def test_result_timeout_without_a_worker(transactional_db):
    handle = handlers.echo.enqueue("nobody runs me")
    began = time.monotonic()
    with pytest.raises(ResultTimeout):
        handle.result(timeout=0.3)
    assert time.monotonic() - began < 2
    assert handle.stored_result() is None and handle.status() == "pending"


def test_handle_rebuilt_from_an_id_in_another_thread(worker):
    handle = handlers.echo.enqueue({"from": "elsewhere"})
    seen = {}

    def other_process_stand_in():
        from django.db import connections

        try:
            seen["value"] = get_handle(str(handle.id), handle.queue).result(timeout=15)
        finally:
            connections.close_all()

    waiter = threading.Thread(target=other_process_stand_in)
    waiter.start()
    time.sleep(0.3)  # the waiter is listening before any worker exists
    worker()
    waiter.join(20)
    assert seen["value"] == {"from": "elsewhere"}
    assert handle.status() == "completed"


def test_result_wakes_on_notify_not_on_the_poll(worker):
    worker()
    handle = handlers.slow.enqueue({"seconds": 0.3})
    began = time.monotonic()
    assert handle.result(timeout=10)["slept"] == 0.3
    # The poll interval is 1 s (RUNNERQ['POLL_INTERVAL_SECONDS']): the NOTIFY must be what woke us.
    assert time.monotonic() - began < 0.95


@override_settings(RUNNERQ={"LISTEN": False, "POLL_INTERVAL_SECONDS": 0.2})
def test_results_by_polling_when_listen_is_off(worker):
    worker(listen=False)
    assert handlers.echo.enqueue("polled").result(timeout=10) == "polled"


def test_aresult(worker):
    worker()
    handle = handlers.echo.enqueue({"awaited": True})
    assert asyncio.run(handle.aresult(timeout=10)) == {"awaited": True}
