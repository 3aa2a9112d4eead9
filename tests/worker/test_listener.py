"""What the dispatcher waits on between claims: ``LISTEN`` on the session it claims on
(``WorkListener``). A NOTIFY ends the wait at once, what was drained does not end the next one,
notifications that arrive while the session runs a claim are kept for the next wait, and a lost
session ends the wait, is reopened after a pause, and the wait after the reconnection returns at
once. The listener runs on a thread of its own, as in the worker: the session is that thread's
Django connection."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections

from runnerq_django.logs import event_of
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


class DispatcherThread:
    """A WorkListener on a thread of its own (the dispatcher's), every call made on that thread."""

    def __init__(self) -> None:
        self.thread = ThreadPoolExecutor(max_workers=1)
        self.waiter = self.call(lambda: WorkListener([QUEUE], "default", stop=threading.Event()))

    def call(self, fn):
        return self.thread.submit(fn).result(timeout=60)

    def timed_wait(self, timeout: float) -> float:
        def timed() -> float:
            began = time.monotonic()
            self.waiter.wait(timeout)
            return time.monotonic() - began

        return self.call(timed)

    def session_pid(self) -> int:
        return self.call(lambda: connections["default"].connection.info.backend_pid)

    def claim_like(self) -> None:
        """A statement on the dispatcher's session, as a claim is."""

        def query() -> None:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_sleep(0.3)")

        self.call(query)

    def close(self) -> None:
        self.call(lambda: (self.waiter.close(), connections.close_all()))
        self.thread.shutdown()


@pytest.fixture
def dispatcher():
    on_thread = DispatcherThread()
    assert on_thread.timed_wait(5) < 1  # the first wait listens and returns: catch up
    assert on_thread.waiter.listening is not None
    yield on_thread
    on_thread.close()


@behind_pgbouncer_no_listen
def test_a_notify_ends_the_wait_and_without_one_it_lasts_the_timeout(dispatcher):
    assert dispatcher.timed_wait(0.3) >= 0.3
    threading.Timer(0.2, notify).start()
    assert dispatcher.timed_wait(10) < 5


@behind_pgbouncer_no_listen
def test_it_listens_on_the_session_it_claims_on(dispatcher):
    """No session of its own: the LISTEN is on the dispatcher thread's Django connection, and no
    dedicated listening session (notify.connect's) was opened."""
    listening = dispatcher.call(lambda: connections["default"].connection)
    assert dispatcher.waiter.listening is listening
    with connection.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [dispatcher.session_pid()])
        assert cursor.fetchone()[0].startswith("LISTEN")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'runnerq-listener'"
        )
        assert cursor.fetchone()[0] == 0


@behind_pgbouncer_no_listen
def test_drained_notifications_do_not_end_the_next_wait(dispatcher):
    for _ in range(3):
        notify()
    time.sleep(0.2)  # delivered to the session
    dispatcher.call(dispatcher.waiter.drain)
    assert dispatcher.timed_wait(0.3) >= 0.3
    # a burst before a claim wakes once: the dispatcher drains it before claiming
    for _ in range(3):
        notify()
    time.sleep(0.2)
    assert dispatcher.timed_wait(5) < 1
    dispatcher.call(dispatcher.waiter.drain)
    assert dispatcher.timed_wait(0.3) >= 0.3


@behind_pgbouncer_no_listen
def test_a_notify_during_a_claim_ends_the_next_wait(dispatcher):
    """Work committed while the session runs a claim may have been missed by that claim: its
    notification arrives during the statement, and the wait after it returns at once."""
    threading.Timer(0.1, notify).start()
    dispatcher.claim_like()  # the NOTIFY lands while this runs
    assert dispatcher.timed_wait(5) < 1
    assert dispatcher.timed_wait(0.3) >= 0.3  # and only once


@behind_pgbouncer_no_listen
def test_a_lost_session_ends_the_wait_and_is_reopened_after_a_pause(dispatcher, caplog):
    lost = dispatcher.session_pid()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [lost])
    with caplog.at_level(logging.INFO, logger="runnerq_django.worker"):
        assert dispatcher.timed_wait(10) < 5
        assert dispatcher.waiter.listening is None
        assert "runnerq.listener.lost" in map(event_of, caplog.records)
        # within the pause (0.1 s first) the wait sleeps; after it, it reconnects and returns
        deadline = time.monotonic() + 10
        while dispatcher.waiter.listening is None and time.monotonic() < deadline:
            dispatcher.timed_wait(0.05)
        assert dispatcher.waiter.listening is not None
        assert "runnerq.listener.reconnected" in map(event_of, caplog.records)
    assert dispatcher.session_pid() != lost
    threading.Timer(0.2, notify).start()
    assert dispatcher.timed_wait(10) < 5  # and listening again


@behind_pgbouncer_no_listen
def test_a_session_replaced_by_a_claim_listens_again_and_catches_up(dispatcher, caplog):
    """A claim that failed drops the dispatcher's connection and the next one reconnects
    (worker.db.reset_connection): that session listens on nothing yet, so the next wait listens
    and returns at once, for a claim of what was committed meanwhile."""
    dispatcher.call(lambda: connections["default"].close())
    dispatcher.claim_like()  # a new session
    with caplog.at_level(logging.INFO, logger="runnerq_django.worker"):
        assert dispatcher.timed_wait(5) < 1
    assert "runnerq.listener.reconnected" in map(event_of, caplog.records)
    assert dispatcher.waiter.listening is dispatcher.call(lambda: connections["default"].connection)
    threading.Timer(0.2, notify).start()
    assert dispatcher.timed_wait(10) < 5


def test_the_poller_waits_the_interval_or_until_the_stop():
    stop = threading.Event()
    poller = Poller(stop)
    poller.drain()
    began = time.monotonic()
    poller.wait(0.2)
    assert time.monotonic() - began >= 0.2
    threading.Timer(0.1, stop.set).start()
    began = time.monotonic()
    poller.wait(10)
    assert time.monotonic() - began < 5
