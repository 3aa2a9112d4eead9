"""enqueue / enqueue_many / aenqueue: the rows they write, the caller's transaction, validation."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

import django.db
import pytest
from django.db import transaction
from django.test import override_settings

from runnerq_django import OnDuplicate, aenqueue, enqueue, enqueue_many
from runnerq_django.spec.keys import business_key
from runnerq_django.storage.errors import DuplicateActivity, InvalidArgument
from tests.worker import handlers
from tests.worker.support import fetch, row_of

pytestmark = pytest.mark.django_db(transaction=True)


def payload_of(activity_id):
    return fetch("SELECT payload FROM runnerq_inputs WHERE activity_id = %s", [activity_id])[0][0]


def test_enqueue_writes_the_row_with_the_handlers_defaults():
    handle = handlers.always_fails.enqueue({"a": 1})
    row = row_of(handle.id)
    assert handle.created and handle.queue == "default"
    assert row["activity_type"] == "t.always_fails"
    assert row["status"] == "pending"
    assert row["max_retries"] == 2 and row["retry_delay_seconds"] == 0  # from the decorator
    assert row["root_activity_id"] == handle.id and row["parent_activity_id"] is None
    assert '"a": 1' in payload_of(handle.id)


def test_enqueue_options_override_the_defaults():
    handle = handlers.echo.enqueue(
        [1, 2],
        delay=timedelta(minutes=5),
        priority=4,
        max_attempts=9,
        timeout=12,
        retry_delay=3,
        max_retry_delay=40,
        metadata={"tenant": "acme"},
        queue="other_queue",
    )
    row = row_of(handle.id)
    assert handle.queue == "other_queue" and row["queue_name"] == "other_queue"
    assert row["status"] == "scheduled"
    assert row["scheduled_at"] > datetime.now(UTC) + timedelta(minutes=4)
    assert (row["priority"], row["max_retries"], row["timeout_seconds"]) == (4, 9, 12)
    assert (row["retry_delay_seconds"], row["max_retry_delay_seconds"]) == (3, 40)
    assert json.loads(row["metadata"]) == {"tenant": "acme"}


def test_enqueue_by_type_name_for_other_languages():
    handle = enqueue("ChargeCard", {"amount": 5}, queue="payments")  # no Python handler
    row = row_of(handle.id)
    assert row["activity_type"] == "ChargeCard"
    assert (row["priority"], row["max_retries"], row["timeout_seconds"]) == (
        2,
        3,
        300,
    )  # the documented defaults


def test_enqueue_joins_the_callers_transaction():
    with transaction.atomic():
        kept = handlers.echo.enqueue("kept")
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = handlers.echo.enqueue("rolled back")
        assert row_of(rolled_back.id)["status"] == "pending"  # visible inside the transaction
        raise RuntimeError("the view failed")
    assert row_of(kept.id)["status"] == "pending"
    assert row_of(rolled_back.id) == {}
    assert fetch("SELECT count(*) FROM runnerq_inputs WHERE activity_id = %s", [rolled_back.id])[0][0] == 0


def test_enqueue_many_is_one_batch_with_per_item_keys():
    handles = handlers.echo.enqueue_many([{"n": n} for n in range(50)], priority=3)
    assert len(handles) == 50 and len({h.id for h in handles}) == 50
    assert fetch(
        "SELECT count(*), min(priority), max(priority) FROM runnerq_activities WHERE activity_type = 't.echo'"
    )[0] == (50, 3, 3)
    keyed = enqueue_many("t.echo", ["a", "b"], idempotency_keys=["k-a", "k-b"])
    again = enqueue_many("t.echo", ["a", "b"], idempotency_keys=["k-a", "k-b"])
    assert [h.id for h in again] == [h.id for h in keyed] and not any(h.created for h in again)
    assert enqueue_many(handlers.echo, []) == []
    with pytest.raises(InvalidArgument, match="idempotency_keys"):
        enqueue_many(handlers.echo, ["a", "b"], idempotency_keys=["only-one"])


def test_enqueue_many_with_keys_is_one_statement():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    keys = [f"k-{n}" for n in range(100)]
    with CaptureQueriesContext(connection) as first:
        handles = handlers.echo.enqueue_many(list(range(100)), idempotency_keys=keys)
    assert len(first) == 1, [q["sql"][:80] for q in first.captured_queries]
    assert all(h.created for h in handles)
    # Half of the keys are taken already, half are new, and one new key comes twice.
    mixed = keys[50:] + [f"n-{n}" for n in range(50)] + ["n-7"]
    with CaptureQueriesContext(connection) as second:
        again = handlers.echo.enqueue_many(list(range(101)), idempotency_keys=mixed)
    assert len(second) == 1
    assert [h.created for h in again] == [False] * 50 + [True] * 50 + [False]
    assert [h.id for h in again[:50]] == [h.id for h in handles[50:]]  # return_existing: the holders
    assert again[100].id == again[57].id  # the repeat within the batch returns the first one's activity
    assert fetch("SELECT count(*), count(DISTINCT idempotency_key) FROM runnerq_activities")[0] == (150, 150)
    assert fetch("SELECT count(*) FROM runnerq_inputs")[0][0] == 150
    # Inside the caller's transaction too: one statement, rolled back with the caller.
    with pytest.raises(RuntimeError), transaction.atomic():
        with CaptureQueriesContext(connection) as inside:
            rolled = handlers.echo.enqueue_many([1, 2], idempotency_keys=["r-1", "k-3"])
        assert [h.created for h in rolled] == [True, False] and rolled[1].id == handles[3].id
        raise RuntimeError("the view failed")
    assert len(inside) == 1
    assert fetch("SELECT count(*) FROM runnerq_activities")[0][0] == 150


def test_enqueue_many_with_overlapping_keys_from_8_threads_creates_one_activity_per_key():
    import random
    import threading

    from django.db import connections

    keys = [f"shared-{n}" for n in range(120)]
    seen: list[tuple[str, uuid.UUID, bool]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def submit(seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(4):
                batch = rng.sample(keys, 60)  # overlapping, each thread in its own order
                handles = handlers.echo.enqueue_many(batch, idempotency_keys=batch)
                with lock:
                    seen.extend((key, h.id, h.created) for key, h in zip(batch, handles))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    ids_by_key: dict[str, set] = {}
    for key, activity_id, _ in seen:
        ids_by_key.setdefault(key, set()).add(activity_id)
    assert all(len(ids) == 1 for ids in ids_by_key.values())  # every submit of a key got the same activity
    created = [key for key, _, was_created in seen if was_created]
    assert sorted(created) == sorted(ids_by_key)  # created exactly once per key
    rows = fetch("SELECT idempotency_key, count(*) FROM runnerq_activities GROUP BY 1")
    assert len(rows) == len(ids_by_key) and all(n == 1 for _, n in rows)
    assert fetch("SELECT count(*) FROM runnerq_inputs")[0][0] == len(ids_by_key)


def test_idempotency_key_policies():
    first = handlers.echo.enqueue("x", idempotency_key="order-42")
    again = handlers.echo.enqueue("y", idempotency_key="order-42")
    assert first.created and not again.created and again.id == first.id
    stored = fetch("SELECT idempotency_key FROM runnerq_activities WHERE id = %s", [first.id])[0][0]
    assert stored == business_key("order-42", "t.echo")
    # Keys are per type: the same key on another type is another activity.
    other = enqueue("t.noop", None, idempotency_key="order-42")
    assert other.created and other.id != first.id
    with pytest.raises(DuplicateActivity):
        handlers.echo.enqueue("z", idempotency_key="order-42", on_duplicate="no_reuse")
    reused = handlers.echo.enqueue("z", idempotency_key="order-42", on_duplicate=OnDuplicate.ALLOW_REUSE)
    assert reused.created and reused.id != first.id


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"payload": {"when": object()}}, "payload['when']"),  # the JSON path of what isn't JSON
        ({"payload": float("nan")}, "payload"),
        ({"priority": 0}, "priority"),
        ({"queue": "no spaces"}, "queue"),
        ({"delay": -1}, "delay"),
        ({"delay": datetime(2030, 1, 1)}, "delay"),  # naive
        ({"metadata": {"n": 1}}, "metadata"),
        ({"on_duplicate": "sometimes"}, "on_duplicate"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"max_attempts": 2**31}, "max_attempts"),
    ],
)
def test_bad_arguments_name_the_field_and_write_nothing(kwargs, field):
    payload = kwargs.pop("payload", None)
    with pytest.raises(InvalidArgument) as raised:
        handlers.echo.enqueue(payload, **kwargs)
    assert raised.value.field == field, raised.value
    assert fetch("SELECT count(*) FROM runnerq_activities")[0][0] == 0


LONE_SURROGATE = json.loads('"\\ud83d"')  # valid JSON text, but no UTF-8 form


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"payload": LONE_SURROGATE}, "payload"),
        ({"payload": {"nested": ["ok", LONE_SURROGATE]}}, "payload"),
        ({"metadata": {"tenant": LONE_SURROGATE}}, "metadata"),
    ],
)
def test_text_that_utf8_cannot_encode_is_an_invalid_argument(kwargs, field):
    payload = kwargs.pop("payload", None)
    for call in (
        lambda: handlers.echo.enqueue(payload, **kwargs),
        lambda: enqueue_many(handlers.echo, [1, payload], **kwargs),
    ):
        with pytest.raises(InvalidArgument, match="lone surrogate U\\+D83D") as raised:
            call()
        assert raised.value.field == field
    assert fetch("SELECT count(*) FROM runnerq_activities")[0][0] == 0


@override_settings(RUNNERQ={"MAX_PAYLOAD_BYTES": 100})
def test_payload_size_limit_names_the_limit():
    handlers.echo.enqueue("x" * 50)
    with pytest.raises(InvalidArgument, match="at most 100 bytes"):
        handlers.echo.enqueue("x" * 200)


def test_enqueue_with_explicit_id_and_run_at():
    activity_id = uuid.uuid4()
    at = datetime.now(UTC) + timedelta(hours=1)
    handle = handlers.echo.enqueue(None, id=activity_id, delay=at)
    row = row_of(activity_id)
    assert handle.id == activity_id and row["status"] == "scheduled"
    assert abs((row["scheduled_at"] - at).total_seconds()) < 5


def test_aenqueue_from_async_code():
    from asgiref.sync import sync_to_async
    from django.db import connections

    async def view():
        one = await aenqueue(handlers.echo, {"async": True})
        many = await handlers.echo.aenqueue_many([1, 2, 3])
        # What Django does at the end of an async request: close the sync thread's connection.
        await sync_to_async(connections.close_all, thread_sensitive=True)()
        return one, many

    one, many = asyncio.run(view())
    assert row_of(one.id)["status"] == "pending"
    assert [row_of(h.id)["status"] for h in many] == ["pending"] * 3


def _terminate_own_session(live_db_url: str) -> None:
    import psycopg
    from django.db import connection

    with psycopg.connect(live_db_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])


@pytest.mark.direct_postgres(
    "it kills its own server session by pid; a client of PgBouncer holds no server session of its own "
    "(its backend pid is PgBouncer's), and a killed server connection is replaced by the pooler unseen"
)
def test_after_a_dead_session_one_enqueue_is_unavailable_and_the_next_reconnects(live_db_url):
    """A server restart kills every session. Django replaces a broken connection only between
    requests, so a process serving none (a producer loop, a command) must not stay stuck on it."""
    from runnerq_django.storage.errors import Unavailable

    handlers.echo.enqueue("opens the connection")
    _terminate_own_session(live_db_url)
    with pytest.raises(Unavailable):
        handlers.echo.enqueue("on the dead session")
    assert handlers.echo.enqueue("on a new session").created


@pytest.mark.direct_postgres(
    "it kills its own server session by pid; a client of PgBouncer holds no server session of its own "
    "(its backend pid is PgBouncer's), and a killed server connection is replaced by the pooler unseen"
)
def test_a_dead_session_inside_atomic_is_left_to_the_block(live_db_url):
    from django.db import connection

    from runnerq_django.storage.errors import Unavailable

    handlers.echo.enqueue("opens the connection")
    with pytest.raises(django.db.Error), transaction.atomic():
        _terminate_own_session(live_db_url)
        with pytest.raises(Unavailable):
            handlers.echo.enqueue("on the dead session")
        # Not closed under the block: a new session would silently drop the block's writes.
        assert connection.in_atomic_block and connection.connection is not None
    assert handlers.echo.enqueue("after the block").created


def test_enqueue_many_writes_the_rows_enqueue_writes_column_by_column():
    options = dict(priority=4, delay=timedelta(seconds=90), max_attempts=6, timeout=11, metadata={"t": "a"})
    single = [handlers.echo.enqueue({"n": n}, idempotency_key=f"one-{n}", **options) for n in range(3)]
    batch = handlers.echo.enqueue_many(
        [{"n": n} for n in range(3)], idempotency_keys=["b-0", "b-1", "b-2"], **options
    )
    for one, many in zip(single, batch):
        rows = [row_of(one.id), row_of(many.id)]
        for row, handle in zip(rows, (one, many)):
            assert row.pop("id") == row.pop("root_activity_id") == handle.id
            row.pop("idempotency_key")
            row["scheduled_at"] -= row.pop("created_at")
        assert rows[0] == rows[1]
        assert payload_of(one.id) == payload_of(many.id)
    with pytest.raises(InvalidArgument, match="payload"):
        handlers.echo.enqueue_many([1, 2, {"bad": object()}], queue="q_refused")
    with pytest.raises(InvalidArgument, match="idempotency_key"):
        handlers.echo.enqueue_many([1, 2], idempotency_keys=["ok", ""], queue="q_refused")
    assert fetch("SELECT count(*) FROM runnerq_activities WHERE queue_name = 'q_refused'")[0][0] == 0
