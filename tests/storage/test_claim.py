import time
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runnerq_django import storage
from runnerq_django.storage.types import NewActivity
from tests.storage.support import backdate, event_types, make_due, row, sql_rows, sql_value, submit


def test_claim_marks_processing_under_a_fresh_token(queue):
    activity_id = submit(queue, payload={"x": 1}, metadata={"k": "v"})
    before_ms = int(time.time() * 1000)
    with CaptureQueriesContext(connection) as queries:
        [claimed] = storage.claim(queue, types=["t"], lease_ms=45000, worker_id="host-1")
    assert len(queries) == 1
    assert claimed.id == activity_id and claimed.payload == {"x": 1} and claimed.metadata == {"k": "v"}
    assert claimed.token.startswith("host-1:") and len(claimed.token) == len("host-1:") + 32
    assert claimed.attempt == 1 and claimed.claim.token == claimed.token
    got = row(activity_id)
    assert got["status"] == "processing" and got["current_worker_id"] == claimed.token
    assert got["started_at"] is not None and got["retry_count"] == 0
    assert before_ms + 44000 < got["lease_deadline_ms"] == claimed.lease_deadline_ms < before_ms + 60000
    assert event_types(activity_id) == []
    assert storage.claim(queue, types=["t"]) == []


def test_tokens_are_unique_per_claim_even_in_one_batch(queue):
    storage.submit_many(queue, [NewActivity("t") for _ in range(20)])
    claimed = storage.claim(queue, limit=20, worker_id="w")
    assert len({c.token for c in claimed}) == 20
    anonymous = storage.claim(queue, limit=5)
    assert anonymous == []
    submit(queue)
    [one] = storage.claim(queue)
    assert str(uuid.UUID(one.token)) == one.token  # no worker id: the token is a UUID


def test_batch_comes_back_in_claim_order(queue):
    low = submit(queue, priority=1)
    old = submit(queue, priority=2)
    new = submit(queue, priority=2)
    critical = submit(queue, priority=4)
    backdate(old, "created_at", 60)
    claimed = storage.claim(queue, types=["t"], limit=4)
    assert [c.id for c in claimed] == [critical, old, new, low]


def test_attempts_already_made_go_first_within_a_priority(queue):
    fresh = submit(queue)
    retried = submit(queue)
    sql_rows("UPDATE runnerq_activities SET retry_count = 2 WHERE id = %s", [retried])
    assert [c.id for c in storage.claim(queue, limit=2)] == [retried, fresh]


def test_due_time_orders_retries_and_sleeps_by_when_they_became_due(queue):
    a = submit(queue, delay_seconds=100)
    b = submit(queue, delay_seconds=100)
    sql_rows("UPDATE runnerq_activities SET scheduled_at = now() - interval '1 minute' WHERE id = %s", [b])
    sql_rows("UPDATE runnerq_activities SET scheduled_at = now() - interval '30 seconds' WHERE id = %s", [a])
    assert [c.id for c in storage.claim(queue, limit=5)] == [b, a]


def test_type_filter(queue):
    x = submit(queue, "x")
    y = submit(queue, "y")
    z = submit(queue, "z")
    assert [c.id for c in storage.claim(queue, types=["y"])] == [y]
    assert [c.id for c in storage.claim(queue, types=["x", "w"], limit=5)] == [x]
    assert [c.id for c in storage.claim(queue, limit=5)] == [z]


def test_other_queues_are_not_claimed(queue):
    submit(queue + "_other")
    assert storage.claim(queue) == []


def test_not_yet_due_is_not_claimed(queue):
    for status in ("scheduled", "retrying", "waiting"):
        activity_id = submit(queue, delay_seconds=60)
        sql_rows("UPDATE runnerq_activities SET status = %s WHERE id = %s", [status, activity_id])
        assert storage.claim(queue) == [], status
        make_due(activity_id)
        assert [c.id for c in storage.claim(queue)] == [activity_id], status


def test_waiting_without_a_deadline_is_never_due(queue):
    activity_id = submit(queue)
    sql_rows("UPDATE runnerq_activities SET status = 'waiting', scheduled_at = NULL WHERE id = %s", [activity_id])
    assert storage.claim(queue) == []


def test_claim_clears_the_wait(queue):
    activity_id = submit(queue)
    sql_rows("UPDATE runnerq_activities SET status = 'waiting', scheduled_at = now(), waiting_result_id = %s "
             "WHERE id = %s", [uuid.uuid4(), activity_id])
    storage.claim(queue)
    assert row(activity_id)["waiting_result_id"] is None


def test_inputs_of_other_serializations_are_left_for_their_sdk(queue):
    superjson = submit(queue)
    empty = submit(queue)
    missing = submit(queue)
    sql_rows("UPDATE runnerq_inputs SET serialization = 'superjson-v1' WHERE activity_id = %s", [superjson])
    sql_rows("UPDATE runnerq_inputs SET serialization = '' WHERE activity_id = %s", [empty])
    sql_rows("DELETE FROM runnerq_inputs WHERE activity_id = %s", [missing])
    claimed = storage.claim(queue, limit=10)
    assert {c.id for c in claimed} == {empty, missing}
    assert all(c.payload is None for c in claimed)
    assert row(superjson)["status"] == "pending"


@pytest.mark.parametrize("types", [None, ["t"], ["t", "u"]])
def test_an_unknown_serialization_at_the_head_of_the_queue_does_not_starve_claims(queue, types):
    """A row whose input is in a serialization we can't read (a later SDK's 'msgpack-v1', say)
    is left alone, and the walk goes past it: it must not be locked and dropped on every claim
    while the rows behind it wait."""
    foreign = submit(queue, priority=4)
    sql_rows("UPDATE runnerq_inputs SET serialization = 'msgpack-v1' WHERE activity_id = %s", [foreign])
    ours = [submit(queue, priority=2), submit(queue, "u" if types and "u" in types else "t", priority=1)]
    claimed = [storage.claim(queue, types=types, limit=1) for _ in range(3)]
    assert [[c.id for c in batch] for batch in claimed] == [[ours[0]], [ours[1]], []]
    assert row(foreign)["status"] == "pending" and row(foreign)["current_worker_id"] is None


def test_terminal_and_processing_rows_are_never_claimed(queue):
    for status in ("processing", "completed", "failed", "dead_letter", "cancelled"):
        activity_id = submit(queue)
        sql_rows("UPDATE runnerq_activities SET status = %s WHERE id = %s", [status, activity_id])
    assert storage.claim(queue, limit=10) == []


def test_claimed_record_carries_the_row(queue):
    parent = submit(queue, "p")
    new = NewActivity("c", payload=[1], priority=3, max_retries=4, timeout_seconds=9, retry_delay_seconds=2,
                      max_retry_delay_seconds=5, idempotency_key="key", parent_id=parent, depth=1)
    storage.submit(queue, new)
    [c] = storage.claim(queue, types=["c"])
    assert (c.queue_name, c.activity_type, c.priority, c.max_retries, c.timeout_seconds) == (queue, "c", 3, 4, 9)
    assert (c.retry_delay_seconds, c.max_retry_delay_seconds, c.depth) == (2, 5, 1)
    assert c.parent_activity_id == parent and c.root_activity_id == parent
    assert c.idempotency_key.startswith("rq:key:v2:")
    assert c.created_at <= c.started_at
    assert sql_value("SELECT started_at FROM runnerq_activities WHERE id = %s", [new.id]) == c.started_at
