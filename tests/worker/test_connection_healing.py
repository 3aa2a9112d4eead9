"""A worker thread's connection is checked before each activity (``worker.db.heal``)."""

from __future__ import annotations

import pytest
from django.db import connection
from psycopg import pq

from runnerq_django.worker.db import heal


@pytest.mark.django_db(transaction=True)
def test_a_session_left_busy_by_an_interrupted_query_is_replaced_before_the_next_activity():
    """An interrupt raised into a handler thread (a lost lease, a hard time limit) can land
    between a query's send and the read of its result: Django sees no error, and the session
    stays busy, so every later statement on the thread failed ("can't change 'autocommit' now:
    connection in transaction status ACTIVE") until the reaper took the work back."""
    connection.ensure_connection()
    raw = connection.connection
    raw.pgconn.send_query(b"SELECT pg_sleep(0.05)")  # sent, its result never read: what the cut leaves
    assert raw.info.transaction_status == pq.TransactionStatus.ACTIVE
    assert not connection.errors_occurred

    heal(connection, connection.alias)

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    assert connection.connection is not raw
    assert raw.closed


@pytest.mark.django_db(transaction=True)
def test_a_healthy_session_is_kept():
    connection.ensure_connection()
    raw = connection.connection
    heal(connection, connection.alias)
    assert connection.connection is raw
