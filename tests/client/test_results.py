"""Handles and results: waiting (LISTEN and polling), failures carrying the stored error,
timeouts, handles rebuilt from an id in another thread, async waiting."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections
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
    # Woken by the NOTIFY on the loop, not by its poll (1 s).
    slow = handlers.slow.enqueue({"seconds": 0.3})
    began = time.monotonic()
    assert asyncio.run(slow.aresult(timeout=10))["slept"] == 0.3
    assert time.monotonic() - began < 0.95


def test_async_waits_hold_no_executor_thread_and_time_out_from_the_call(transactional_db):
    """Twenty ``aresult()`` waits at once on a loop whose default executor has six threads (as
    on a two-core machine): they used to wait in those threads, returning after 3, 6, 9 and
    12 s, with any other ``run_in_executor`` queued behind them."""
    handles = [handlers.echo.enqueue(i) for i in range(20)]  # no worker: each wait times out
    timeout = 3.0

    async def waits_and_a_job():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=6))
        began = loop.time()
        ended: list[float] = []

        async def wait(handle):
            try:
                await handle.aresult(timeout=timeout)
            except ResultTimeout:
                ended.append(loop.time())

        waits = [asyncio.create_task(wait(handle)) for handle in handles]
        await asyncio.sleep(0.5)  # every wait is under way
        await loop.run_in_executor(None, time.sleep, 0.1)  # someone else's job
        job_done = loop.time()
        await asyncio.gather(*waits)
        return began, job_done, ended

    began, job_done, ended = asyncio.run(waits_and_a_job())
    assert len(ended) == 20
    assert job_done < min(ended)  # the job did not wait for a wait to time out
    assert all(end - began >= timeout for end in ended)  # none before its time
    assert max(ended) - began < 2 * timeout  # and all within about one timeout of the call


def other_backends() -> set[int]:
    """The pids of this test database's other sessions."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {row[0] for row in cursor.fetchall()}


@pytest.mark.parametrize("listen", [True, False])
def test_threads_waiting_for_results_hold_no_connection_while_they_wait(transactional_db, listen):
    """Forty threads in ``result()`` held forty-one connections (one each, and the shared
    LISTEN session): two hundred would exhaust ``max_connections`` and lock out the workers."""
    handles = [handlers.echo.enqueue(i) for i in range(40)]  # no worker: each wait times out
    before = other_backends()  # an earlier test's, closing
    timed_out = []

    def wait(handle):
        try:
            handle.result(timeout=4)
        except ResultTimeout:
            timed_out.append(handle.id)
        finally:
            connections.close_all()

    with override_settings(RUNNERQ={"LISTEN": listen}):
        threads = [threading.Thread(target=wait, args=(handle,)) for handle in handles]
        for thread in threads:
            thread.start()
        time.sleep(1.5)  # every thread has read once and is waiting (polling: backed off to 1 s)
        seen = []
        for _ in range(10):
            seen.append(len(other_backends() - before))
            time.sleep(0.15)
        for thread in threads:
            thread.join(10)
    assert len(timed_out) == 40
    # The LISTEN session, and now and then threads that reconnected for their poll's read (the
    # forty polls land about a second apart each, so a sample can catch several at once): held
    # all along, it was one connection per thread in every sample.
    assert sorted(seen)[len(seen) // 2] <= 6, seen
    assert max(seen) <= 20, seen
