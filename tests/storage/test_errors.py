"""Database failures surface as the spec's error kinds, with the driver's error kept as the cause."""

import threading

import psycopg
import pytest
from django.db import DatabaseError, OperationalError, connection, connections

from runnerq_django.storage import db, errors
from runnerq_django.storage.types import NewActivity
from tests.helpers import free_port
from tests.storage.support import submit_and_claim


@pytest.fixture
def dead_server():
    """The default connection pointed at a port where no server listens (restored afterwards)."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(
        HOST="127.0.0.1", PORT=str(free_port()), OPTIONS={**saved["OPTIONS"], "connect_timeout": 2}
    )
    yield
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


def test_an_unreachable_database_is_unavailable(queue, dead_server, store):
    for call in (
        lambda: store.claim(queue),
        lambda: store.submit(queue, NewActivity("t")),
        lambda: store.reap(queue, 10),
    ):
        with pytest.raises(errors.Unavailable) as failed:
            call()
        assert failed.value.kind == errors.ErrorKind.UNAVAILABLE
        assert isinstance(failed.value.__cause__, psycopg.OperationalError)


def test_a_lock_wait_past_lock_timeout_is_a_timeout(queue, live_db_url, store):
    claim = submit_and_claim(queue)
    with psycopg.connect(live_db_url) as holder:
        holder.execute("SELECT 1 FROM runnerq_activities WHERE id = %s FOR UPDATE", [claim.id])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            with pytest.raises(errors.Timeout) as failed:
                store.fail(queue, claim, "x")
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        assert failed.value.__cause__.sqlstate == "55P03"
    assert store.fail(queue, claim, "x") == "retrying"  # nothing was written by the timed-out call


def test_statement_timeout_is_a_timeout(queue):
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '50ms'")
    try:
        with pytest.raises(errors.Timeout), db.database_errors(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(1)")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")


def real_error(statement: str) -> DatabaseError:
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement)
    except DatabaseError as exc:
        return exc
    raise AssertionError("the statement did not fail")


def test_an_unexpected_database_error_is_internal_and_keeps_its_cause(queue):
    exc = real_error("SELECT 1 / 0")
    mapped = db.translate(exc)
    assert isinstance(mapped, errors.Internal) and "22012" in mapped.message
    assert isinstance(mapped.__cause__, psycopg.errors.DivisionByZero)


def test_a_session_stuck_in_a_failed_transaction_is_unavailable(queue, store):
    """25P02: the session refuses every statement until its transaction is rolled back. Retrying
    on the same session can't help; a fresh connection does, which is what the worker does for
    Unavailable (is_transient resets the connection)."""
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")  # behind Django's back, as a multi-statement query could leave it
    try:
        real_error("SELECT 1 / 0")
        with pytest.raises(errors.Unavailable) as failed:
            store.claim(queue)
        assert failed.value.__cause__.sqlstate == "25P02"
        assert "failed transaction" in failed.value.message
    finally:
        connection.connection.execute("ROLLBACK")
    assert store.claim(queue) == []


def test_concurrency_conflicts_are_conflicts():
    cause = psycopg.errors.DeadlockDetected("deadlock detected")
    wrapped = OperationalError("deadlock detected")
    wrapped.__cause__ = cause
    mapped = db.translate(wrapped)
    assert isinstance(mapped, errors.Conflict) and "retry" in mapped.message and mapped.__cause__ is cause


def test_a_storage_error_is_not_rewrapped(queue):
    with pytest.raises(errors.ClaimLost), db.database_errors():
        raise errors.ClaimLost("kept")


def test_errors_inside_the_callers_transaction_roll_back_with_it(queue, store):
    from django.db import transaction

    first = NewActivity("t")
    with pytest.raises(errors.Conflict), transaction.atomic():
        store.submit(queue, first)
        store.submit(queue, NewActivity("t", id=first.id))
    assert store.claim(queue) == []


def test_operations_work_from_several_threads(queue, store):
    """Each thread has its own Django connection; the storage layer keeps no shared state."""
    store.submit_many(queue, [NewActivity("t") for _ in range(40)])
    claimed: list = []

    def worker():
        try:
            while batch := store.claim(queue, limit=3):
                claimed.extend(batch)
                store.complete_many(queue, [(c.claim, None) for c in batch])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(claimed) == 40 and len({c.id for c in claimed}) == 40
