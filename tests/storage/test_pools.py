"""Worker pool rows: the operations round-trip, refuse bad arguments before any SQL, and map
database failures to the spec's error kinds like every other storage operation."""

import uuid

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runnerq_django.storage import errors, pools
from tests.storage.support import sql_rows, sql_value
from tests.storage.test_errors import dead_server  # noqa: F401  (fixture)


def test_register_heartbeat_capacity_prune_and_deregister(queue):
    first, second = uuid.uuid4(), uuid.uuid4()
    pools.register(first, queue, 4, ["a", "b", "a"])
    pools.register(second, queue, 2, None)
    assert sql_rows(
        "SELECT max_workers, activity_types FROM runnerq_worker_pools WHERE pool_id = %s", [first]
    ) == [(4, ["a", "b"])]
    assert pools.live_capacity(60)[queue] == pools.QueueCapacity(queue, 2, 6)
    pools.register(first, queue, 8, None)  # again: updated in place
    assert pools.live_capacity(60)[queue].slots == 10
    assert pools.heartbeat([first, uuid.uuid4()]) == {first}
    sql_rows(
        "UPDATE runnerq_worker_pools SET last_seen_at = now() - interval '1 hour' WHERE pool_id = %s",
        [second],
    )
    assert pools.prune(600) == 1
    assert pools.heartbeat([]) == set() and pools.deregister([]) == 0
    assert pools.deregister([first]) == 1
    assert sql_value("SELECT count(*) FROM runnerq_worker_pools WHERE queue_name = %s", [queue]) == 0


NIL = uuid.UUID(int=0)


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda q: pools.register(uuid.uuid4(), "bad queue", 4, None), "queue"),
        (lambda q: pools.register(uuid.uuid4(), "é", 4, None), "queue"),
        (lambda q: pools.register("not-a-uuid", q, 4, None), "pool_id"),
        (lambda q: pools.register(NIL, q, 4, None), "pool_id"),
        (lambda q: pools.register(uuid.uuid4(), q, 0, None), "max_workers"),
        (lambda q: pools.register(uuid.uuid4(), q, 2**31, None), "max_workers"),
        (lambda q: pools.register(uuid.uuid4(), q, True, None), "max_workers"),
        (lambda q: pools.register(uuid.uuid4(), q, 4, []), "activity_types"),
        (lambda q: pools.register(uuid.uuid4(), q, 4, "a"), "activity_types"),
        (lambda q: pools.register(uuid.uuid4(), q, 4, ["a", ""]), "activity_types[]"),
        (lambda q: pools.heartbeat([uuid.uuid4(), "x"]), "pool_ids[1]"),
        (lambda q: pools.deregister(["x"]), "pool_ids[0]"),
        (lambda q: pools.prune(0), "stale_seconds"),
        (lambda q: pools.prune(float("nan")), "stale_seconds"),
        (lambda q: pools.live_capacity(-1), "alive_seconds"),
    ],
)
def test_bad_arguments_are_refused_before_any_sql(queue, call, field):
    with CaptureQueriesContext(connection) as queries, pytest.raises(errors.InvalidArgument) as refused:
        call(queue)
    assert refused.value.field == field, refused.value.message
    assert len(queries) == 0


def test_database_failures_are_the_specs_error_kinds(queue, dead_server):  # noqa: F811
    for call in (
        lambda: pools.register(uuid.uuid4(), queue, 4, None),
        lambda: pools.heartbeat([uuid.uuid4()]),
        lambda: pools.deregister([uuid.uuid4()]),
        lambda: pools.prune(60),
        lambda: pools.live_capacity(60),
    ):
        with pytest.raises(errors.Unavailable) as failed:
            call()
        assert isinstance(failed.value.__cause__, psycopg.OperationalError)


def test_a_lock_wait_past_lock_timeout_is_a_timeout(queue, live_db_url):
    pool = uuid.uuid4()
    pools.register(pool, queue, 4, None)
    with psycopg.connect(live_db_url) as holder:
        holder.execute("SELECT 1 FROM runnerq_worker_pools WHERE pool_id = %s FOR UPDATE", [pool])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            with pytest.raises(errors.Timeout):
                pools.heartbeat([pool])
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
    assert pools.heartbeat([pool]) == {pool}
