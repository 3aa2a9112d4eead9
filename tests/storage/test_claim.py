import dataclasses
import time
import uuid

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runnerq_django.storage import attempts
from runnerq_django.storage.types import ClaimedActivity, NewActivity
from tests.storage.support import backdate, event_types, make_due, row, sql_rows, sql_value, submit


def test_claim_marks_processing_under_a_fresh_token(queue, store):
    activity_id = submit(queue, payload={"x": 1}, metadata={"k": "v"})
    before_ms = int(time.time() * 1000)
    with CaptureQueriesContext(connection) as queries:
        [claimed] = store.claim(queue, types=["t"], lease_ms=45000, worker_id="host-1")
    assert len(queries) == 1
    assert claimed.id == activity_id and claimed.payload == {"x": 1} and claimed.metadata == {"k": "v"}
    assert claimed.token.startswith("host-1:") and len(claimed.token) == len("host-1:") + 32
    assert claimed.attempt == 1 and claimed.claim.token == claimed.token
    got = row(activity_id)
    assert got["status"] == "processing" and got["current_worker_id"] == claimed.token
    assert got["started_at"] is not None and got["retry_count"] == 0
    assert before_ms + 44000 < got["lease_deadline_ms"] == claimed.lease_deadline_ms < before_ms + 60000
    assert event_types(activity_id) == []
    assert store.claim(queue, types=["t"]) == []


def test_tokens_are_unique_per_claim_even_in_one_batch(queue, store):
    store.submit_many(queue, [NewActivity("t") for _ in range(20)])
    claimed = store.claim(queue, limit=20, worker_id="w")
    assert len({c.token for c in claimed}) == 20
    anonymous = store.claim(queue, limit=5)
    assert anonymous == []
    submit(queue)
    [one] = store.claim(queue)
    assert str(uuid.UUID(one.token)) == one.token  # no worker id: the token is a UUID


def test_batch_comes_back_in_claim_order(queue, store):
    low = submit(queue, priority=1)
    old = submit(queue, priority=2)
    new = submit(queue, priority=2)
    critical = submit(queue, priority=4)
    backdate(old, "created_at", 60)
    claimed = store.claim(queue, types=["t"], limit=4)
    assert [c.id for c in claimed] == [critical, old, new, low]


def test_several_types_come_back_in_claim_order_across_types(queue, store):
    """A claim of several types merges one walk per type: the batch is in claim order over all
    of them, and other types are left alone."""
    expected = []
    for step in range(12):
        activity_type = ("a", "b", "c")[step % 3]
        activity_id = submit(queue, activity_type, priority=1 + (step * 5) % 4)
        backdate(activity_id, "created_at", 100 - step)
        if activity_type != "c":
            expected.append((-(1 + (step * 5) % 4), step, activity_id))
    retried = submit(queue, "b", priority=1)
    sql_rows("UPDATE runnerq_activities SET retry_count = 3 WHERE id = %s", [retried])
    expected.append((-1, -1, retried))  # attempts made go first within its priority
    claimed = store.claim(queue, types=["a", "b"], limit=20)
    assert [c.id for c in claimed] == [activity_id for *_, activity_id in sorted(expected)]
    assert {c.activity_type for c in claimed} == {"a", "b"}
    assert [c.id for c in store.claim(queue, types=["b", "a"], limit=1)] == []


def test_a_claim_of_several_types_passes_over_rows_another_claimer_holds(queue, live_db_url, store):
    """The top row is locked by a claim in flight (another connection): a claim of one still
    gets the next row, in every form of the claim."""
    first, second, third = (
        submit(queue, "a", priority=4),
        submit(queue, "b", priority=3),
        submit(queue, "a", priority=2),
    )
    with psycopg.connect(live_db_url) as other:
        other.execute("SELECT 1 FROM runnerq_activities WHERE id = %s FOR UPDATE", [first])
        for types in (["a", "b"], None):
            [got] = store.claim(queue, types=types, limit=1)
            assert got.id == second, types
            sql_rows(
                "UPDATE runnerq_activities SET status = 'pending', current_worker_id = NULL WHERE id = %s",
                [second],
            )
    assert [c.id for c in store.claim(queue, types=["a", "b"], limit=3)] == [first, second, third]


def test_a_claim_of_several_types_comes_back_short_only_when_no_more_work_is_free(queue, live_db_url, store):
    """Another claimer holds a larger batch (40 rows at the head) than this claim asks for (8): the
    claim still comes back full -- a worker takes a short batch to mean the queue is drained,
    and waits for a NOTIFY before claiming again."""
    ids = [submit(queue, ("a", "b")[i % 2], priority=4 if i < 40 else 1) for i in range(60)]
    with psycopg.connect(live_db_url) as other:
        other.execute("SELECT 1 FROM runnerq_activities WHERE id = ANY(%s) FOR UPDATE", [ids[:40]])
        got = store.claim(queue, types=["a", "b"], limit=8)
        assert len(got) == 8 and {c.id for c in got} <= set(ids[40:])
        rest = store.claim(queue, types=["a", "b"], limit=20)
        assert len(rest) == 12 and {c.id for c in got} | {c.id for c in rest} == set(ids[40:])
        assert store.claim(queue, types=["a", "b"], limit=1) == []  # only locked rows are left
    assert {c.id for c in store.claim(queue, types=["a", "b"], limit=50)} == set(ids[:40])


@pytest.mark.slow
def test_a_claim_is_never_empty_while_free_work_of_its_types_exists(queue, live_db_url, store):
    """Other claimers hold every row a claim of several types reads as a candidate (its limit
    plus 1,000): it goes past them (the fallback) and still returns work, not an empty batch."""
    held = 1 + attempts.CANDIDATES_BEYOND_LIMIT
    store.submit_many(queue, [NewActivity(("a", "b")[i % 2], priority=4) for i in range(held)])
    free = [submit(queue, "a", priority=1), submit(queue, "b", priority=1)]
    with psycopg.connect(live_db_url) as other:
        other.execute(
            "SELECT 1 FROM runnerq_activities WHERE queue_name = %s AND priority = 4 FOR UPDATE", [queue]
        )
        got = store.claim(queue, types=["a", "b"], limit=1)
        assert [c.id for c in got] in ([free[0]], [free[1]])


# Up to MAX_LITERAL_TYPES the types are written into the claim's statement; past it, a parameter.
IN_THE_STATEMENT = attempts.MAX_MERGED_TYPES + 2
AS_A_PARAMETER = attempts.MAX_LITERAL_TYPES + 1


@pytest.mark.parametrize(
    "types, limit, shape",
    [
        (IN_THE_STATEMENT, 5, "a.activity_type = E'x0'\n"),  # a locking walk per type
        (IN_THE_STATEMENT, 200, "h.activity_type IN (E'x0', "),  # types x limit past MAX_TYPE_WALK_ROWS
        (AS_A_PARAMETER, 5, "ANY(%(types)s::text[])"),
    ],
    ids=["each type", "the head then each type", "a parameter"],
)
def test_a_claim_of_many_types_takes_them_in_claim_order(queue, store, types, limit, shape):
    many = [f"x{i}" for i in range(types - 2)] + ["a", "b"]
    statement, _ = store.claim_statement(queue, types=many, limit=limit)
    assert shape in statement
    a, b = submit(queue, "a", priority=1), submit(queue, "b", priority=2)
    assert [c.id for c in store.claim(queue, types=many, limit=limit)] == [b, a]


def test_types_in_the_statement_are_quoted_whatever_they_hold(queue, store):
    """A type is any text: written into the statement, its quotes, backslashes and percent signs
    (and a placeholder's text) stay what they are."""
    odd = ["it's", "back\\slash", "100%", "%(limit)s", "%(queue)s", "E'x'"]
    types = [*odd, *(f"x{i}" for i in range(attempts.MAX_MERGED_TYPES))]
    # claim_each_type; claim_any_of and claim_many_types (types x limit past MAX_TYPE_WALK_ROWS)
    for listed, limit in ((odd[:3], 3), (odd[:3], 600), (types, 200)):
        statement, _ = store.claim_statement(queue, types=listed, limit=limit)
        assert "E'it''s'" in statement and "E'100%%'" in statement
        submitted = {submit(queue, name): name for name in listed}
        claimed = store.claim(queue, types=listed, limit=limit)
        assert {c.id: c.activity_type for c in claimed} == submitted


@pytest.mark.parametrize("ahead", [0, 150])
@pytest.mark.parametrize(
    "types, shape",
    [(20, "E'm19'"), (AS_A_PARAMETER, "(SELECT %(type_64)s)")],
    ids=["in the statement", "a parameter"],
)
def test_a_claim_of_more_types_than_it_can_sort_merges_their_walks_in_claim_order(
    queue, store, ahead, types, shape
):
    """Past the head of the queue (all of another type when ``ahead``), one walk per type
    merged; with the types as a parameter, when types x a limit of 100 is past
    MAX_TYPE_WALK_ROWS. The batch is the first 100 of the types in claim order -- priority, then
    attempts made, then age -- and then the next ones."""
    many = [f"m{i}" for i in range(types)]
    limit = 100
    assert len(many) * limit > attempts.MAX_TYPE_WALK_ROWS
    statement, _ = store.claim_statement(queue, types=many, limit=limit)
    assert shape in statement  # the merged walks
    store.submit_many(queue, [NewActivity("other", priority=4) for _ in range(ahead)])
    expected = []
    for step in range(260):
        priority, retries = 1 + (step * 7) % 4, (step * 3) % 3
        activity_id = submit(queue, many[(step * 11) % 20], priority=priority)  # 20 of them
        sql_rows(
            "UPDATE runnerq_activities SET retry_count = %s, created_at = now() - make_interval(secs => %s) "
            "WHERE id = %s",
            [retries, 1000 - step, activity_id],
        )
        expected.append((-priority, -retries, step, activity_id))
    order = [activity_id for *_, activity_id in sorted(expected)]
    first = store.claim(queue, types=many, limit=limit)
    assert [c.id for c in first] == order[:limit]
    second = store.claim(queue, types=many, limit=limit)
    assert [c.id for c in second] == order[limit : 2 * limit]
    assert [c.id for c in store.claim(queue, types=many, limit=limit)] == order[2 * limit :]
    assert (
        sql_value(
            "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = 'pending'", [queue]
        )
        == ahead
    )


def test_attempts_already_made_go_first_within_a_priority(queue, store):
    fresh = submit(queue)
    retried = submit(queue)
    sql_rows("UPDATE runnerq_activities SET retry_count = 2 WHERE id = %s", [retried])
    assert [c.id for c in store.claim(queue, limit=2)] == [retried, fresh]


def test_due_time_orders_retries_and_sleeps_by_when_they_became_due(queue, store):
    a = submit(queue, delay_seconds=100)
    b = submit(queue, delay_seconds=100)
    sql_rows("UPDATE runnerq_activities SET scheduled_at = now() - interval '1 minute' WHERE id = %s", [b])
    sql_rows("UPDATE runnerq_activities SET scheduled_at = now() - interval '30 seconds' WHERE id = %s", [a])
    assert [c.id for c in store.claim(queue, limit=5)] == [b, a]


def test_type_filter(queue, store):
    x = submit(queue, "x")
    y = submit(queue, "y")
    z = submit(queue, "z")
    assert [c.id for c in store.claim(queue, types=["y"])] == [y]
    assert [c.id for c in store.claim(queue, types=["x", "w"], limit=5)] == [x]
    assert [c.id for c in store.claim(queue, limit=5)] == [z]


def test_other_queues_are_not_claimed(queue, store):
    submit(queue + "_other")
    assert store.claim(queue) == []


def test_not_yet_due_is_not_claimed(queue, store):
    for status in ("scheduled", "retrying", "waiting"):
        activity_id = submit(queue, delay_seconds=60)
        sql_rows("UPDATE runnerq_activities SET status = %s WHERE id = %s", [status, activity_id])
        assert store.claim(queue) == [], status
        make_due(activity_id)
        assert [c.id for c in store.claim(queue)] == [activity_id], status


def test_waiting_without_a_deadline_is_never_due(queue, store):
    activity_id = submit(queue)
    sql_rows(
        "UPDATE runnerq_activities SET status = 'waiting', scheduled_at = NULL WHERE id = %s", [activity_id]
    )
    assert store.claim(queue) == []


def test_claim_clears_the_wait(queue, store):
    activity_id = submit(queue)
    sql_rows(
        "UPDATE runnerq_activities SET status = 'waiting', scheduled_at = now(), waiting_result_id = %s "
        "WHERE id = %s",
        [uuid.uuid4(), activity_id],
    )
    store.claim(queue)
    assert row(activity_id)["waiting_result_id"] is None


def test_inputs_in_serializations_we_read_are_claimed_and_others_left_for_their_sdk(queue, store):
    superjson = submit(queue, payload={"json": {"a": 1}})
    empty = submit(queue)
    missing = submit(queue)
    foreign = submit(queue)
    sql_rows("UPDATE runnerq_inputs SET serialization = 'superjson-v1' WHERE activity_id = %s", [superjson])
    sql_rows("UPDATE runnerq_inputs SET serialization = '' WHERE activity_id = %s", [empty])
    sql_rows("DELETE FROM runnerq_inputs WHERE activity_id = %s", [missing])
    sql_rows("UPDATE runnerq_inputs SET serialization = 'msgpack-v1' WHERE activity_id = %s", [foreign])
    claimed = {c.id: c for c in store.claim(queue, limit=10)}
    assert set(claimed) == {superjson, empty, missing}
    assert claimed[superjson].payload == {"a": 1} and claimed[superjson].serialization == "superjson-v1"
    assert claimed[empty].payload is None and claimed[missing].payload is None
    assert row(foreign)["status"] == "pending"


@pytest.mark.parametrize("types", [None, ["t"], ["t", "u"]])
def test_an_unknown_serialization_at_the_head_of_the_queue_does_not_starve_claims(queue, types, store):
    """A row whose input is in a serialization we can't read (a later SDK's 'msgpack-v1', say)
    is left alone, and the walk goes past it: it must not be locked and dropped on every claim
    while the rows behind it wait."""
    foreign = submit(queue, priority=4)
    sql_rows("UPDATE runnerq_inputs SET serialization = 'msgpack-v1' WHERE activity_id = %s", [foreign])
    ours = [submit(queue, priority=2), submit(queue, "u" if types and "u" in types else "t", priority=1)]
    claimed = [store.claim(queue, types=types, limit=1) for _ in range(3)]
    assert [[c.id for c in batch] for batch in claimed] == [[ours[0]], [ours[1]], []]
    assert row(foreign)["status"] == "pending" and row(foreign)["current_worker_id"] is None


def test_terminal_and_processing_rows_are_never_claimed(queue, store):
    for status in ("processing", "completed", "failed", "dead_letter", "cancelled"):
        activity_id = submit(queue)
        sql_rows("UPDATE runnerq_activities SET status = %s WHERE id = %s", [status, activity_id])
    assert store.claim(queue, limit=10) == []


def test_claimed_record_carries_the_row(queue, store):
    parent = submit(queue, "p")
    new = NewActivity(
        "c",
        payload=[1],
        priority=3,
        max_retries=4,
        timeout_seconds=9,
        retry_delay_seconds=2,
        max_retry_delay_seconds=5,
        idempotency_key="key",
        parent_id=parent,
        depth=1,
    )
    store.submit(queue, new)
    [c] = store.claim(queue, types=["c"])
    assert (c.queue_name, c.activity_type, c.priority, c.max_retries, c.timeout_seconds) == (
        queue,
        "c",
        3,
        4,
        9,
    )
    assert (c.retry_delay_seconds, c.max_retry_delay_seconds, c.depth) == (2, 5, 1)
    assert c.parent_activity_id == parent and c.root_activity_id == parent
    assert c.idempotency_key.startswith("rq:key:v2:")
    assert c.created_at <= c.started_at
    assert sql_value("SELECT started_at FROM runnerq_activities WHERE id = %s", [new.id]) == c.started_at
    # Every field is there, as the dataclass's own __init__ would make it (the claim fills the
    # record's __dict__ itself), and it stays frozen.
    again = ClaimedActivity(**{f.name: getattr(c, f.name) for f in dataclasses.fields(ClaimedActivity)})
    assert again == c and vars(again) == vars(c)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.priority = 1


def test_a_batch_shares_the_timestamps_it_reads_once(queue, store):
    store.submit_many(queue, [NewActivity("t") for _ in range(3)])
    claimed = store.claim(queue, limit=3)
    assert len({id(c.started_at) for c in claimed}) == 1  # the claim's now(), read once
    assert len({c.created_at for c in claimed}) == len({id(c.created_at) for c in claimed})


def test_claimed_times_read_the_same_after_a_reconnect_and_in_another_session_time_zone(queue, store):
    """started_at comes back as text, read by the connection's timestamptz loader, which is made
    once per connection: a new connection gets a new loader, and a session in another zone
    still gets the instant Postgres stored."""
    from runnerq_django.storage import db

    first = submit(queue)
    [a] = store.claim(queue, types=["t"])
    loader = db.timestamptz_loader("default")
    assert db.timestamptz_loader("default") is loader  # made once per connection
    connection.close()
    second = submit(queue)
    [b] = store.claim(queue, types=["t"])
    assert db.timestamptz_loader("default") is not loader
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
    try:
        third = submit(queue)
        [c] = store.claim(queue, types=["t"])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
    for claimed, activity_id in ((a, first), (b, second), (c, third)):
        assert claimed.id == activity_id
        stored = sql_value("SELECT started_at FROM runnerq_activities WHERE id = %s", [activity_id])
        assert claimed.started_at == stored and claimed.started_at.utcoffset() is not None
