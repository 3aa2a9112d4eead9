"""What storage tests share: reading rows straight from Postgres and the conformance runner's
fixtures (expire a lease, make due, backdate), written as plain SQL like the runner's."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from runnerq_django.storage.types import Claim, NewActivity
from tests import pgbouncer


def sql_rows(statement: str, params: list | tuple | dict | None = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def sql_value(statement: str, params: list | tuple | dict | None = None) -> Any:
    rows = sql_rows(statement, params)
    return rows[0][0] if rows else None


def row(activity_id: uuid.UUID) -> dict | None:
    """The activity's row as ``to_jsonb`` renders it (what the conformance runner compares)."""
    text = sql_value("SELECT to_jsonb(a)::text FROM runnerq_activities a WHERE id = %s", [activity_id])
    return None if text is None else json.loads(text)


def events(activity_id: uuid.UUID) -> list[tuple[str, str | None, dict]]:
    return [
        (event_type, worker_id, json.loads(detail) if detail else None)
        for event_type, worker_id, detail in sql_rows(
            "SELECT event_type, worker_id, detail::text FROM runnerq_events WHERE activity_id = %s ORDER BY id",
            [activity_id],
        )
    ]


def event_types(activity_id: uuid.UUID) -> list[str]:
    return [event_type for event_type, _, _ in events(activity_id)]


def result(result_id: uuid.UUID) -> dict | None:
    text = sql_value("SELECT to_jsonb(r)::text FROM runnerq_results r WHERE activity_id = %s", [result_id])
    return None if text is None else json.loads(text)


def count_in_queue(queue: str) -> dict[str, int]:
    """Rows of every table for ``queue`` (to prove a refused call wrote nothing)."""
    tables = [
        "runnerq_activities",
        "runnerq_inputs",
        "runnerq_results",
        "runnerq_events",
        "runnerq_idempotency",
        "runnerq_dependencies",
    ]
    return {t: sql_value(f"SELECT count(*) FROM {t} WHERE queue_name = %s", [queue]) for t in tables}


def expire_lease(activity_id: uuid.UUID) -> None:
    updated = sql_rows(
        "UPDATE runnerq_activities SET lease_deadline_ms = floor(extract(epoch FROM now()) * 1000)::bigint - 10000 "
        "WHERE id = %s RETURNING id",
        [activity_id],
    )
    assert updated, "no row to expire"


def make_due(activity_id: uuid.UUID) -> None:
    assert sql_rows(
        "UPDATE runnerq_activities SET scheduled_at = now() WHERE id = %s RETURNING id", [activity_id]
    )


def backdate(activity_id: uuid.UUID, column: str, seconds: float) -> None:
    assert column in ("completed_at", "created_at", "scheduled_at")
    assert sql_rows(
        f"UPDATE runnerq_activities SET {column} = {column} - make_interval(secs => %s) WHERE id = %s RETURNING id",
        [seconds, activity_id],
    )


def backdate_events(activity_id: uuid.UUID, seconds: float) -> None:
    sql_rows(
        "UPDATE runnerq_events SET created_at = created_at - make_interval(secs => %s) WHERE activity_id = %s",
        [seconds, activity_id],
    )


def submit(queue: str, activity_type: str = "t", **fields) -> uuid.UUID:
    from runnerq_django import storage

    return storage.submit(queue, NewActivity(activity_type, **fields)).id


def claim_one(queue: str, activity_type: str | None = "t", **kwargs) -> Claim:
    from runnerq_django import storage

    claimed = storage.claim(
        queue, types=None if activity_type is None else [activity_type], limit=1, **kwargs
    )
    assert len(claimed) == 1, f"expected one claim, got {claimed}"
    return claimed[0].claim


def submit_and_claim(queue: str, activity_type: str = "t", **fields) -> Claim:
    activity_id = submit(queue, activity_type, **fields)
    got = claim_one(queue, activity_type)
    assert got.id == activity_id
    return got


class OnOwnConnection(threading.Thread):
    """``fn()`` on a Django connection of its own (a thread), as another worker process would run it.

    With ``hold=True`` the call runs inside ``transaction.atomic()`` and the transaction stays
    open, locks and uncommitted writes included, until ``release()``: that freezes the call
    between its last statement and its commit, so a test can run a concurrent operation in
    exactly that window. ``blocked()`` says whether the thread's backend is waiting for a lock.
    """

    def __init__(self, fn: Callable[[], Any], *, hold: bool = False):
        super().__init__(daemon=True)
        self.fn = fn
        self.hold = hold
        self.pid: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.ran = threading.Event()  # fn returned (or raised); with hold, not yet committed
        self._release = threading.Event()
        self._started_pid = threading.Event()

    def run(self) -> None:
        from django.db import connection, connections, transaction

        try:
            connection.ensure_connection()
            self.pid = connection.connection.info.backend_pid
            self._started_pid.set()
            if self.hold:
                with transaction.atomic():
                    self._call()
                    self._release.wait(60)
            else:
                self._call()
        except BaseException as exc:  # handed to join_result()
            self.error = self.error or exc
        finally:
            self._started_pid.set()
            self.ran.set()
            connections.close_all()

    def _call(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.ran.set()

    def begin(self) -> OnOwnConnection:
        self.start()
        self._started_pid.wait(30)
        return self

    def blocked(self) -> bool:
        """Whether the thread's backend waits for a lock right now. Behind PgBouncer the client's
        backend pid is the pooler's, not a server's, and the thread's statements may run on any
        server connection: there, whether any session of the test database waits for a lock (the
        test's own thread is the only other one)."""
        if os.environ.get(pgbouncer.ENV_URL):
            return bool(
                sql_value(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE NOT l.granted AND a.datname = current_database()"
                )
            )
        return bool(self.pid) and bool(
            sql_value("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [self.pid])
        )

    def wait_blocked_or_done(self, timeout: float = 10) -> bool:
        """Wait until the call either waits for a lock (True) or has returned (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ran.is_set():
                return False
            if self.blocked():
                return True
            time.sleep(0.02)
        raise AssertionError(f"the call neither returned nor waited for a lock within {timeout}s")

    def release(self) -> None:
        self._release.set()

    def join_result(self, timeout: float = 30) -> Any:
        self.release()
        self.join(timeout)
        assert not self.is_alive(), "the call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


# Values Postgres holds and another SDK may write, which Python can't read, and the reason a
# claim fails each with: (the SQL that plants it in an activity's rows, the reason's start).
DEEP_JSON = "[" * 2000 + "]" * 2000
POISONS = {
    "big_number": (
        "UPDATE runnerq_inputs SET payload = '1e5000'::jsonb WHERE activity_id = %(id)s",
        "input: number out of range for Python",
    ),
    "deep_input": (
        f"UPDATE runnerq_inputs SET payload = '{DEEP_JSON}'::jsonb WHERE activity_id = %(id)s",
        "input: nested too deep for Python",
    ),
    "big_metadata": (
        """UPDATE runnerq_activities SET metadata = '{"k": 1e5000}'::jsonb WHERE id = %(id)s""",
        "metadata: number out of range for Python",
    ),
    "minus_infinity": (
        "UPDATE runnerq_activities SET status = 'scheduled', scheduled_at = '-infinity' WHERE id = %(id)s",
        "scheduled_at: out of range for Python",
    ),
    "created_infinity": (
        "UPDATE runnerq_activities SET created_at = 'infinity' WHERE id = %(id)s",
        "created_at: out of range for Python",
    ),
}


def poison(activity_id: uuid.UUID, kind: str) -> str:
    """Plant the poison ``kind`` in a submitted activity; returns the reason a claim fails it with."""
    statement, reason = POISONS[kind]
    sql_rows(statement, {"id": activity_id})
    return reason
