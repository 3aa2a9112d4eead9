"""The common enqueue (one root activity, no key, no fence) runs as a server-side prepared
statement, writes exactly what the general SUBMIT writes, and joins the caller's transaction."""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction
from django.test import override_settings

from runnerq_django import storage
from runnerq_django.storage import NewActivity, sql


def _prepared_submits() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%INSERT INTO runnerq_activities%VALUES%"],
        )
        return cursor.fetchone()[0]


def _row(activity_id) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_jsonb(a) - 'created_at' - 'id', i.payload::text, i.serialization FROM runnerq_activities a "
            "JOIN runnerq_inputs i ON i.activity_id = a.id WHERE a.id = %s",
            [activity_id],
        )
        row, payload, serialization = cursor.fetchone()
    row = json.loads(row) if isinstance(row, str) else row
    return {**row, "payload": json.loads(payload), "serialization": serialization}


def test_a_root_enqueue_is_prepared_once_per_connection(queue, store):
    for i in range(3):
        store.submit(queue, NewActivity(activity_type="t", payload={"i": i}))
    assert _prepared_submits() == 1


def test_the_prepared_path_writes_what_the_batch_path_writes(queue, store):
    options = dict(
        activity_type="t",
        payload={"n": [1, "x"]},
        priority=3,
        max_retries=5,
        timeout_seconds=9,
        retry_delay_seconds=2,
        max_retry_delay_seconds=60,
        metadata={"k": "v"},
    )
    single = NewActivity(**options)
    store.submit(queue, single)
    batch = NewActivity(**options)
    store.submit_many(queue, [batch, NewActivity(activity_type="other")])  # the general SUBMIT
    one, other = _row(single.id), _row(batch.id)
    assert one.pop("root_activity_id") == str(single.id) and other.pop("root_activity_id") == str(batch.id)
    assert one == other
    assert one["status"] == "pending" and one["serialization"] == "json-v1" and one["metadata"] == {"k": "v"}


def test_a_delayed_root_enqueue_is_scheduled(queue, store):
    activity = NewActivity(activity_type="t", delay_seconds=30)
    store.submit(queue, activity)
    row = _row(activity.id)
    assert row["status"] == "scheduled" and row["scheduled_at"] is not None


def test_the_prepared_path_joins_the_callers_transaction(queue, store):
    activity = NewActivity(activity_type="t")
    with pytest.raises(RuntimeError), transaction.atomic():
        store.submit(queue, activity)
        raise RuntimeError("roll back")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE id = %s", [activity.id])
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM runnerq_inputs WHERE activity_id = %s", [activity.id])
        assert cursor.fetchone()[0] == 0


def test_prepared_statements_can_be_turned_off_for_pgbouncer(queue):
    connection.close()  # a fresh session: nothing prepared yet
    with override_settings(RUNNERQ={"PREPARED_STATEMENTS": False}):
        activity = NewActivity(activity_type="t")
        storage.submit(queue, activity)
        assert _prepared_submits() == 0
    assert _row(activity.id)["status"] == "pending"
    assert "VALUES" in sql.SUBMIT_ROOT  # the same statement, sent unprepared
