"""What the dispatcher waits on between claims: its own LISTEN session (``WorkListener``). A
NOTIFY ends the wait at once, what was drained does not end the next one, and a lost session
ends the wait, is reopened after a pause, and the wait after the reconnection returns at once."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.db import connection

from runnerq_django.spec.constants import work_channel
from runnerq_django.worker.listener import Poller, WorkListener

pytestmark = pytest.mark.django_db(transaction=True)
behind_pgbouncer_no_listen = pytest.mark.direct_postgres(
    "LISTEN needs a session of its own (the worker polls behind transaction pooling)"
)

QUEUE = "listener_test"


def notify() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [work_channel(QUEUE)])


def timed_wait(waiter, timeout: float) -> float:
    began = time.monotonic()
    waiter.wait(timeout)
    return time.monotonic() - began


def connected_listener() -> WorkListener:
    waiter = WorkListener([QUEUE], "default", stop=threading.Event())
    assert timed_wait(waiter, 5) < 1  # the first wait opens the session and returns: catch up
    assert waiter.listener is not None
    return waiter


@behind_pgbouncer_no_listen
def test_a_notify_ends_the_wait_and_without_one_it_lasts_the_timeout():
    waiter = connected_listener()
    try:
        assert timed_wait(waiter, 0.3) >= 0.3
        threading.Timer(0.2, notify).start()
        assert timed_wait(waiter, 10) < 5
    finally:
        waiter.close()


@behind_pgbouncer_no_listen
def test_drained_notifications_do_not_end_the_next_wait():
    waiter = connected_listener()
    try:
        for _ in range(3):
            notify()
        time.sleep(0.2)  # delivered to the session
        waiter.drain()
        assert timed_wait(waiter, 0.3) >= 0.3
        # a burst before a claim wakes once: the dispatcher drains it before claiming
        for _ in range(3):
            notify()
        time.sleep(0.2)
        assert timed_wait(waiter, 5) < 1
        waiter.drain()
        assert timed_wait(waiter, 0.3) >= 0.3
    finally:
        waiter.close()


@behind_pgbouncer_no_listen
def test_a_lost_session_ends_the_wait_and_is_reopened_after_a_pause(caplog):
    waiter = connected_listener()
    try:
        pid = waiter.listener.conn.info.backend_pid
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        with caplog.at_level(logging.INFO, logger="runnerq_django.worker"):
            assert timed_wait(waiter, 10) < 5
            assert waiter.listener is None
            assert "runnerq.listener.lost" in caplog.text
            # within the pause (0.1 s first) the wait sleeps; after it, it reconnects and returns
            deadline = time.monotonic() + 10
            while waiter.listener is None and time.monotonic() < deadline:
                waiter.wait(0.05)
            assert waiter.listener is not None
            assert "runnerq.listener.reconnected" in caplog.text
        threading.Timer(0.2, notify).start()
        assert timed_wait(waiter, 10) < 5  # and listening again
    finally:
        waiter.close()


def test_the_poller_waits_the_interval_or_until_the_stop():
    stop = threading.Event()
    poller = Poller(stop)
    poller.drain()
    assert timed_wait(poller, 0.2) >= 0.2
    threading.Timer(0.1, stop.set).start()
    assert timed_wait(poller, 10) < 5
