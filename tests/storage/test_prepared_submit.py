"""The common enqueue (one root activity, no key, no fence) runs as a server-side prepared
statement, writes exactly what the general SUBMIT writes, and joins the caller's transaction."""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction
from django.test import override_settings

from runnerq_django import storage
from runnerq_django.spec.constants import work_channel
from runnerq_django.spec.keys import business_key
from runnerq_django.storage import NewActivity
from runnerq_django.storage.sql import submit as sql


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


def _comparable(activity_id) -> dict:
    """A row and its input without what differs between two activities: the id (and the root,
    which is the id), the stored key and the times (``scheduled_at`` kept as its distance from
    ``created_at``, both from the transaction's ``now()``)."""
    row = _row(activity_id)
    assert row.pop("root_activity_id") == str(activity_id)
    row.pop("idempotency_key")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT scheduled_at - created_at FROM runnerq_activities WHERE id = %s", [activity_id]
        )
        row["scheduled_at"] = cursor.fetchone()[0]
    return row


UNIFORM_OPTIONS = [
    {},
    dict(
        priority=4,
        max_retries=0,
        timeout_seconds=7,
        retry_delay_seconds=3,
        max_retry_delay_seconds=50,
        metadata={"tenant": "acme"},
        delay_seconds=90.5,
    ),
]


@pytest.mark.parametrize("options", UNIFORM_OPTIONS)
@pytest.mark.parametrize("keyed", [False, True])
def test_the_uniform_batch_writes_what_one_by_one_submits_write(queue, options, keyed):
    from runnerq_django.storage.submit import submit_uniform

    payloads = [{"n": [1, "x"], "s": "é"}, None, 3, "text", [True, {"deep": [1.5]}]]
    one_by_one = []
    for n, payload in enumerate(payloads):
        activity = NewActivity(
            activity_type="t", payload=payload, idempotency_key=f"one-{n}" if keyed else None, **options
        )
        storage.submit(queue, activity)
        one_by_one.append(activity.id)
    keys = [f"batch-{n}" for n in range(len(payloads))] if keyed else [None] * len(payloads)
    template = NewActivity(activity_type="t", payload=payloads[0], **options)
    results = submit_uniform(queue, template, payloads, keys)
    assert [r.created for r in results] == [True] * len(payloads) and results[0].id == template.id
    for single, batch, key in zip(one_by_one, [r.id for r in results], keys):
        assert _comparable(batch) == _comparable(single)
        with connection.cursor() as cursor:
            cursor.execute("SELECT idempotency_key FROM runnerq_activities WHERE id = %s", [batch])
            stored = cursor.fetchone()[0]
        assert stored == (None if key is None else business_key(key, "t"))
    # And what the general SUBMIT (no prepared statements, as behind PgBouncer) writes for them.
    with override_settings(RUNNERQ={"PREPARED_STATEMENTS": False}):
        keys = [f"plain-{n}" for n in range(len(payloads))] if keyed else [None] * len(payloads)
        template = NewActivity(activity_type="t", payload=payloads[0], **options)
        unprepared = submit_uniform(queue, template, payloads, keys)
    for single, batch in zip(one_by_one, [r.id for r in unprepared]):
        assert _comparable(batch) == _comparable(single)


def test_the_uniform_batch_returns_holders_and_resolves_repeats(queue):
    from runnerq_django.storage.submit import submit_uniform

    first = submit_uniform(queue, NewActivity(activity_type="t"), [1, 2, 3], ["a", "b", None])
    again = submit_uniform(queue, NewActivity(activity_type="t"), [4, 5, 6, 7], ["b", "c", "c", None])
    assert [r.created for r in again] == [False, True, False, True]
    assert again[0].id == first[1].id and again[2].id == again[1].id
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s", [queue])
        assert cursor.fetchone()[0] == 5
        cursor.execute("SELECT count(*) FROM runnerq_inputs WHERE queue_name = %s", [queue])
        assert cursor.fetchone()[0] == 5


def test_the_uniform_batch_checks_every_payload_and_key_before_writing(queue):
    from runnerq_django.storage.errors import Conflict, DuplicateActivity, InvalidArgument
    from runnerq_django.storage.submit import submit_uniform
    from runnerq_django.storage.types import OnDuplicate

    with pytest.raises(InvalidArgument) as bad_payload:
        submit_uniform(queue, NewActivity(activity_type="t"), [1, 2, {"x": float("nan")}], [None] * 3)
    assert bad_payload.value.field == "payload['x']"  # named as the client's check names it
    with pytest.raises(InvalidArgument) as deep:
        from runnerq_django.storage.validation import max_json_depth

        nested: object = 1
        for _ in range(max_json_depth() + 1):
            nested = [nested]
        submit_uniform(queue, NewActivity(activity_type="t"), [1, nested], [None] * 2)
    assert "deep" in str(deep.value)
    with pytest.raises(InvalidArgument) as bad_key:
        submit_uniform(queue, NewActivity(activity_type="t"), [1, 2], ["k", ""])
    assert bad_key.value.field == "idempotency_key"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s", [queue])
        assert cursor.fetchone()[0] == 0
    # A reused id fails the statement: nothing of it is written.
    taken = NewActivity(activity_type="t")
    storage.submit(queue, taken)
    with pytest.raises(Conflict):
        submit_uniform(queue, NewActivity(activity_type="t", id=taken.id), [1, 2], [None, None])
    # Policies other than return_existing go key by key (submit_many), with their errors.
    no_reuse = NewActivity(activity_type="t", on_duplicate=OnDuplicate.NO_REUSE)
    submit_uniform(queue, no_reuse, [1], ["once"])
    with pytest.raises(DuplicateActivity):
        submit_uniform(
            queue, NewActivity(activity_type="t", on_duplicate=OnDuplicate.NO_REUSE), [1], ["once"]
        )


def test_the_libpq_path_reports_a_reused_id_and_leaves_the_session_usable(queue, store):
    from runnerq_django.storage.errors import Conflict

    first = NewActivity(activity_type="t")
    store.submit(queue, first)
    assert connection.get_autocommit() and not connection.in_atomic_block  # the libpq path's case
    with pytest.raises(Conflict):
        store.submit(queue, NewActivity(activity_type="t", id=first.id))
    again = NewActivity(activity_type="t", payload={"after": True})
    store.submit(queue, again)
    assert _row(again.id)["payload"] == {"after": True}
    # In the caller's transaction the statement goes through psycopg (which sends its BEGIN).
    inside = NewActivity(activity_type="t")
    with pytest.raises(RuntimeError), transaction.atomic():
        store.submit(queue, inside)
        raise RuntimeError("roll back")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE id = %s", [inside.id])
        assert cursor.fetchone()[0] == 0


def test_the_libpq_path_prepares_again_after_psycopg_deallocates_all(queue, store):
    store.submit(queue, NewActivity(activity_type="t"))
    with connection.cursor() as cursor:
        cursor.execute(
            "DEALLOCATE ALL"
        )  # what psycopg sends after a ROLLBACK when it has prepared statements
    after = NewActivity(activity_type="t")
    store.submit(queue, after)
    assert _row(after.id)["status"] == "pending"
    assert _prepared_submits() == 1


@pytest.mark.parametrize(
    "options", [{}, dict(priority=4, max_retries=0, timeout_seconds=7, metadata={"t": "é"})]
)
def test_a_large_uniform_batch_is_copied_and_writes_what_one_by_one_submits_write(queue, options):
    from runnerq_django.storage.submit import COPY_MIN_ROWS, submit_uniform

    payloads = [
        {"n": n, "s": "tab\there\nnew line \\ é"} if n % 3 else [n, None, "\\N"] for n in range(COPY_MIN_ROWS)
    ]
    payloads[1] = None
    singles = []
    for payload in payloads[:4]:
        activity = NewActivity(activity_type="t", payload=payload, **options)
        storage.submit(queue, activity)
        singles.append(activity.id)
    with connection.cursor() as cursor:
        cursor.execute("LISTEN " + connection.ops.quote_name(work_channel(queue)))
    template = NewActivity(activity_type="t", payload=payloads[0], **options)
    results = submit_uniform(queue, template, payloads, [None] * len(payloads))
    assert [r.created for r in results] == [True] * COPY_MIN_ROWS and results[0].id == template.id
    for single, batch in zip(singles, [r.id for r in results]):
        assert _comparable(batch) == _comparable(single)
    # In input order, each with its own input.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.payload::text FROM runnerq_activities a JOIN runnerq_inputs i ON i.activity_id = a.id "
            "WHERE a.id = ANY(%s) ORDER BY a.ctid",
            [[r.id for r in results]],
        )
        assert [json.loads(p) for (p,) in cursor.fetchall()] == payloads
    # The workers heard of it once.
    notices = list(connection.connection.notifies(timeout=1, stop_after=2))
    assert [n.channel for n in notices] == [work_channel(queue)]


def test_a_copied_batch_with_a_reused_id_writes_nothing(queue):
    from runnerq_django.storage.errors import Conflict
    from runnerq_django.storage.submit import COPY_MIN_ROWS, submit_uniform

    taken = NewActivity(activity_type="t")
    storage.submit(queue, taken)
    with pytest.raises(Conflict):
        submit_uniform(
            queue,
            NewActivity(activity_type="t", id=taken.id),
            list(range(COPY_MIN_ROWS)),
            [None] * COPY_MIN_ROWS,
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s", [queue])
        assert cursor.fetchone()[0] == 1
        cursor.execute("SELECT count(*) FROM runnerq_inputs WHERE queue_name = %s", [queue])
        assert cursor.fetchone()[0] == 1
    # The session is usable afterwards, and in the caller's transaction the batch rolls back with it.
    with pytest.raises(RuntimeError), transaction.atomic():
        submit_uniform(
            queue, NewActivity(activity_type="t"), list(range(COPY_MIN_ROWS)), [None] * COPY_MIN_ROWS
        )
        raise RuntimeError("roll back")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s", [queue])
        assert cursor.fetchone()[0] == 1
