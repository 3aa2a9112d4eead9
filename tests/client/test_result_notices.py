"""``result()`` waits of one process share one LISTEN session per database
(``runnerq_django.listen.result_notices``): many waits at once hold one connection, the session closes
when the last wait leaves, and a session that is killed costs the waits one poll, not their
results."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection, connections

from runnerq_django import get_handle
from runnerq_django.listen import result_notices
from runnerq_django.spec.constants import result_channel
from tests.helpers import wait_until
from tests.worker import handlers

pytestmark = pytest.mark.direct_postgres("LISTEN needs a session of its own")


def listening_sessions(queue: str) -> list[int]:
    """Backend pids of this test database's sessions whose last statement was the LISTEN on
    ``queue``'s result channel."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f'LISTEN "{result_channel(queue)}"'],
        )
        return [row[0] for row in cursor.fetchall()]


def wait_in_threads(handles, timeout: float = 20):
    """Each handle's ``result()`` in a thread of its own; (threads, results by index)."""
    results: dict[int, object] = {}

    def wait(index, handle):
        try:
            results[index] = get_handle(str(handle.id), handle.queue).result(timeout=timeout)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=wait, args=(i, h)) for i, h in enumerate(handles)]
    for thread in threads:
        thread.start()
    return threads, results


def registered(count: int) -> bool:
    notices = result_notices.for_alias("default")
    with notices._lock:
        return sum(len(waits) for waits in notices._waits.values()) == count


def test_twenty_waits_at_once_share_one_session_which_closes_after_the_last(worker, queue_name):
    handles = [handlers.echo.enqueue(i, queue=queue_name) for i in range(20)]
    threads, results = wait_in_threads(handles)
    wait_until(lambda: registered(20), message="20 waits registered")
    assert len(listening_sessions(queue_name)) == 1  # one session for the twenty

    worker(queues=[queue_name])
    for thread in threads:
        thread.join(30)
    assert results == {i: i for i in range(20)}
    # The last wait to leave closed it; Postgres drops the backend a moment later.
    wait_until(lambda: listening_sessions(queue_name) == [], timeout=5, message="the session closed")


def test_a_killed_session_costs_a_poll_and_the_next_wait_opens_another(worker, queue_name):
    first = handlers.echo.enqueue("first", queue=queue_name)
    threads, results = wait_in_threads([first])
    wait_until(lambda: registered(1), message="the wait registered")
    [pid] = listening_sessions(queue_name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    notices = result_notices.for_alias("default")
    wait_until(lambda: notices._thread is None, timeout=5, message="the lost session noticed")

    worker(queues=[queue_name])
    threads[0].join(30)
    assert results == {0: "first"}  # found by its poll

    # A new wait opens a new session, and the NOTIFY wakes it (the poll interval is 1 s).
    second = handlers.slow.enqueue({"seconds": 0.3}, queue=queue_name)
    began = time.monotonic()
    assert second.result(timeout=10)["slept"] == 0.3
    assert time.monotonic() - began < 0.95


# Python 3.12 warns of a fork in a process with threads: that is the case under test.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_starts_with_no_session_and_a_free_lock(worker, queue_name):
    """Forked while a wait of the parent holds a session and while the registry's lock is held
    (as another of the parent's threads might hold it at the fork): the child gets its own."""
    import os

    handle = handlers.echo.enqueue("parent's", queue=queue_name)
    threads, results = wait_in_threads([handle])
    wait_until(lambda: registered(1), message="the parent's wait registered")
    parents = result_notices.for_alias("default")

    with result_notices._notices_lock:
        pid = os.fork()
        if pid == 0:  # the child: report by exit status only, never run the parent's teardown
            try:
                fresh = result_notices.for_alias("default")
                os._exit(0 if fresh is not parents and fresh._thread is None else 1)
            finally:
                os._exit(2)
    deadline = time.monotonic() + 10
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child hung on the registry's lock")
    assert os.waitstatus_to_exitcode(done[1]) == 0

    worker(queues=[queue_name])  # the parent's wait and session are untouched by the child
    threads[0].join(30)
    assert results == {0: "parent's"}


def test_an_async_wait_shares_the_session_and_outlives_its_loss(worker, queue_name):
    """``aresult()`` registers on the same session without a thread of its own, and a killed
    session costs it a poll, as it costs a thread's wait."""
    handle = handlers.echo.enqueue("awaited", queue=queue_name)
    outcome: dict[str, object] = {}

    def run_loop():  # the loop in a thread: this one keeps the database for its checks
        try:
            outcome["value"] = asyncio.run(get_handle(str(handle.id), queue_name).aresult(timeout=20))
        except BaseException as exc:
            outcome["error"] = exc

    loop_thread = threading.Thread(target=run_loop)
    loop_thread.start()
    wait_until(lambda: registered(1) and listening_sessions(queue_name), message="the async wait listening")
    [pid] = listening_sessions(queue_name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    notices = result_notices.for_alias("default")
    wait_until(lambda: notices._thread is None, timeout=5, message="the lost session noticed")

    worker(queues=[queue_name])
    loop_thread.join(30)
    assert outcome == {"value": "awaited"}  # found by its poll
    assert registered(0)
